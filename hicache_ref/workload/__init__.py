"""Workloads: what a trace looks like and what capacity it wants.

- stack_distance: per-page LRU stack distances of a trace in one pass (Mattson et al.), which
  give the unlimited-capacity hit rate, the reuse-distance distribution and the whole
  hit-rate-vs-capacity curve at once;
- trace_stats: `hicache trace stats` figures (lengths, prefix reuse rate, reuse distances);
- trace_synth: Mooncake-format synthetic traces with a requested prefix reuse rate;
- sweep + plateau: the L2 capacity sweep and where its hit-rate curve flattens.
"""
