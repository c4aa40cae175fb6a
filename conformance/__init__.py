"""Conformance suite and the `hicache` command: run against any backend and hardware profile."""
