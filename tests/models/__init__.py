"""Tests of hicache_ref.models: the served models' KV bytes, weights and prefill FLOPs."""
