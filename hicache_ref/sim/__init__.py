"""The simulator that drives the cache, one subpackage per concept, each importing only those listed before it:

- `trace/`: request traces: reading the Mooncake format, the packaged traces, stats, synthesis, conversion.
- `price/`: the cost model: the mechanisms priced from the profile, prefill, net benefit, the ensemble and intervals.
- `run/`: replaying a trace through the cache: serial, served, per TP group, HiCache off, on worker processes.
- `sweep/`: capacity sweeps over replays (L2, L3) and where the curve stops paying.
- `ladder/`: the fix ladder: ladder states as runs, the ablation, the seed scenario.
- `fit/`: the model against a profile's readings: derivation, leave-one-out, held-out workloads, the seed report.
"""
