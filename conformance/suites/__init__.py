"""The conformance suites `hicache conform` runs: layout equivalence, bad input, SPMD determinism, profile targets, and (under --storage) the L3 storage suite."""
