"""The conformance suites `hicache conform` runs: layout equivalence, bad input, SPMD determinism, profile targets, and (under --storage) the L3 storage suite.

`transfer_reference` is the independent definition of every host layout the equivalence suite checks
against; `sglang_diff` gives the differential suite (`test_sglang_differential`) both engines' figures.
"""
