"""Served models as the cache and the prefill see them: attention shape, KV bytes per token, weights, FLOPs (presets by name or a YAML file)."""
