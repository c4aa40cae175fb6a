"""The model against a profile's readings: every derived parameter recomputed with its arithmetic
(`derive`, `fit_stats`), computed once per process (`derivation_cache`), each reading as the model
computes it (`modeled_readings`), judged by leave-one-out (`loo`) and on held-out workloads
(`held_out`), and the seed's ladder and readings together (`seed_report`)."""
