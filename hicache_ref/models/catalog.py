"""Model presets by name, and models from a YAML file with the same fields.

Figures are from each model's published config.json and model card (`source`); the seed's
deployment names no model, so its preset holds only the KV geometry the seed gives.
"""

from __future__ import annotations

from pathlib import Path

from hicache_ref.models.architecture import ModelArch

_DEEPSEEK = dict(attention="mla", layers=61, kv_heads=1, kv_dim=512 + 64, heads=128, qk_head_dim=128 + 64,
                 v_head_dim=128, kv_dtype="bfloat16")
_GQA = dict(attention="mha", qk_head_dim=128, v_head_dim=128, kv_dim=128, weight_bytes_per_param=2.0)

PRESETS: dict[str, ModelArch] = {m.name: m for m in (
    ModelArch("seed-mla-78", attention="mla", layers=78, kv_heads=1, kv_dim=576,
              source="seed work (P800 acceptance runs): MLA latent, 78 layers, kv_dim 576, bf16; the model is not named"),
    ModelArch("deepseek-v3", **_DEEPSEEK, total_params=671e9, active_params=37e9, weight_bytes_per_param=1.0,
              source="deepseek-ai/DeepSeek-V3 config.json (61 layers, 128 heads, kv_lora_rank 512, rope 64, "
                     "nope 128, v 128) and model card (671B total, 37B active, FP8 weights)"),
    ModelArch("llama-3.1-8b", layers=32, heads=32, kv_heads=8, total_params=8.03e9, active_params=8.03e9, **_GQA,
              source="meta-llama/Llama-3.1-8B config.json (32 layers, 32 heads, 8 KV heads, head dim 128), bf16"),
    ModelArch("llama-3.1-70b", layers=80, heads=64, kv_heads=8, total_params=70.6e9, active_params=70.6e9, **_GQA,
              source="meta-llama/Llama-3.1-70B config.json (80 layers, 64 heads, 8 KV heads, head dim 128), bf16"),
    ModelArch("qwen2.5-72b", layers=80, heads=64, kv_heads=8, total_params=72.7e9, active_params=72.7e9, **_GQA,
              source="Qwen/Qwen2.5-72B-Instruct config.json (80 layers, 64 heads, 8 KV heads, head dim 128), bf16"),
    ModelArch("qwen3-32b", layers=64, heads=64, kv_heads=8, total_params=32.8e9, active_params=32.8e9, **_GQA,
              source="Qwen/Qwen3-32B config.json (64 layers, 64 heads, 8 KV heads, head dim 128), bf16"),
    ModelArch("qwen3-235b-a22b", layers=94, heads=64, kv_heads=4, total_params=235e9, active_params=22e9, **_GQA,
              source="Qwen/Qwen3-235B-A22B config.json (94 layers, 64 heads, 4 KV heads, head dim 128) and model "
                     "card (235B total, 22B active), bf16"),
)}

MAX_MODEL_FILE_BYTES = 64 << 10


def load_model(name_or_path: str) -> ModelArch:
    """A preset by name, or a YAML file (a path, or a name ending .yaml/.yml) holding ModelArch's
    fields. ValueError naming the file and key, or the known presets."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if not ("/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))):
        raise ValueError(f"--model: unknown model {name_or_path!r}; presets: {', '.join(PRESETS)}, or a YAML file")
    import yaml

    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"--model: {path}: not a regular file")
    if path.stat().st_size > MAX_MODEL_FILE_BYTES:
        raise ValueError(f"--model: {path}: larger than {MAX_MODEL_FILE_BYTES >> 10} KiB")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"--model: {path}: not YAML ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of ModelArch fields")
    known = set(ModelArch.__dataclass_fields__)
    extra = sorted(str(k) for k in data if k not in known)
    if extra:
        raise ValueError(f"{path}: {extra[0]}: unknown key; known: {', '.join(sorted(known))}")
    try:
        return ModelArch(**{"name": path.stem, **data})
    except TypeError as e:
        raise ValueError(f"{path}: {e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
