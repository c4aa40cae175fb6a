"""The simulator that drives the cache: trace reading, replay (serial and served), the cost model, and the workloads built on replay (sweep, fix ladder, trace stats and synthesis)."""
