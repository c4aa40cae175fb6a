"""Served models as the cache and the prefill see them: attention shape, KV bytes per token, weights,
FLOPs (`architecture`), presets by name or a YAML file with the same fields (`catalog`)."""
