"""The storage conformance suite (`hicache conform --storage SPEC`): any L3 backend's round trip,
exists semantics, integrity, concurrency and restart, plus the pools and comparisons it shares with
the harness tests (`page_pools`)."""
