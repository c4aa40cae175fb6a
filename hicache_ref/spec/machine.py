"""Sizes from the machine: a served model's KV geometry per rank and L1 as SGLang sizes its KV pool.

SGLang (model_runner.py, profile_max_num_token) gives the KV pool what is left of the device's
memory share after the weights: (HBM x mem_fraction_static - weights per rank) / KV bytes per
token per rank, rounded down to whole pages. The harness reads HBM from the profile and the
weights and KV bytes from the model (hicache_ref.models); every step is kept as a line of
arithmetic so the commands can print how the size came about.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
KV_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8"}  # the model's -> --dtype's
DEFAULT_MEM_FRACTION_STATIC = 0.85  # used when --model sizes L1 and no share is given (said in the arithmetic)


@dataclass(frozen=True)
class MachineSizing:
    """What --model resolved: the geometry fields, L1 tokens per rank (None: not derived) and the arithmetic."""

    model: str
    tp: int
    tp_source: str
    geometry: dict
    l1_tokens: int | None
    lines: tuple[str, ...]
    mem_fraction_static: float | None = None  # the share L1 was sized with (None: L1 given)

    def to_json(self) -> dict:
        return dict(model=self.model, tp=self.tp, tp_source=self.tp_source, geometry=dict(self.geometry),
                    l1_tokens=self.l1_tokens, mem_fraction_static=self.mem_fraction_static,
                    arithmetic=list(self.lines))


def l1_tokens(hbm_gib: float, mem_fraction_static: float, weight_bytes: float, token_bytes: int,
              page_size: int) -> tuple[int, list[str]]:
    """(L1 tokens per rank, the arithmetic): ValueError saying which term leaves no room."""
    share = hbm_gib * GIB * mem_fraction_static
    kv = share - weight_bytes
    lines = [f"device share: {hbm_gib:g} GiB HBM x {mem_fraction_static:g} = {share / 1e9:,.2f} GB",
             f"KV pool: {share / 1e9:,.2f} GB - weights {weight_bytes / 1e9:,.2f} GB per rank = {kv / 1e9:,.2f} GB"]
    if kv <= 0:
        raise ValueError(f"the weights ({weight_bytes / 1e9:,.2f} GB per rank) leave no KV pool in "
                         f"{hbm_gib:g} GiB x {mem_fraction_static:g}: give a larger --tp or --mem-fraction-static, "
                         "or --l1-tokens")
    tokens = int(kv // token_bytes)
    pages = tokens // page_size
    lines.append(f"L1: {kv:,.0f} B / {token_bytes:,} B per token per rank = {tokens:,} tokens, "
                 f"rounded down to {pages:,} pages of {page_size} = {pages * page_size:,} tokens")
    if pages < 1:
        raise ValueError(f"the KV pool of {kv:,.0f} B holds no page of {page_size} tokens; give --l1-tokens")
    return pages * page_size, lines


def resolve(model, profile, tp: int | None, l1_given: int | None, mem_fraction_static: float | None,
            page_size: int) -> MachineSizing:
    """The geometry of one rank of `model` (a hicache_ref.models ModelArch) at `tp` ranks (None: the
    profile's devices per node, else 1), and L1 from `profile`'s HBM unless `l1_given`. ValueError
    naming what is missing (the profile's HBM, the model's weights) with the option that replaces it."""
    if tp is not None:
        ranks, source = tp, "--tp"
    elif profile is not None and profile.device.devices_per_node:
        ranks, source = int(profile.device.devices_per_node), f"profile {profile.name}'s devices per node"
    else:
        ranks, source = 1, "one rank (no --tp, no devices per node in the profile)"
    geometry = dict(model.geometry(ranks))
    geometry["dtype"] = KV_DTYPE_NAMES[geometry["dtype"]]
    token_bytes = model.token_kv_bytes(ranks)
    sides = "" if model.attention == "mla" else " x 2 (K and V)"
    lines = [f"model {model.name} at TP {ranks} ({source}): {model.layers} layers x "
             f"{model.kv_heads_per_rank(ranks)} KV head(s) per rank x {model.kv_dim} x {model.kv_dtype}{sides} "
             f"= {token_bytes:,} B of KV per token per rank"]
    if l1_given is not None:
        lines.append(f"L1: {l1_given:,} tokens per rank as given (--l1-tokens)")
        return MachineSizing(model.name, ranks, source, geometry, None, tuple(lines))
    hbm = None if profile is None else profile.device.hbm_gib
    if hbm is None:
        name = "none" if profile is None else profile.name
        raise ValueError(f"profile {name} does not give device.hbm_gib, so L1 cannot be sized from the model: "
                         "give --l1-tokens (KV tokens per rank), or measure the card's memory into a profile "
                         f"on the node: hicache calibrate --profile {name} --out FILE (device.hbm_gib)")
    share = DEFAULT_MEM_FRACTION_STATIC if mem_fraction_static is None else mem_fraction_static
    if mem_fraction_static is None:
        lines.append(f"--mem-fraction-static not given: {DEFAULT_MEM_FRACTION_STATIC} assumed (give your launch's)")
    try:
        weights = model.weight_bytes_per_rank(ranks)
    except ValueError as e:
        raise ValueError(f"{e}; or give --l1-tokens") from None
    lines.append(f"weights: {model.known('total_params'):.4g} parameters x {model.known('weight_bytes_per_param'):g} B "
                 f"/ {ranks} ranks = {weights / 1e9:,.2f} GB per rank")
    tokens, more = l1_tokens(float(hbm), share, weights, token_bytes, page_size)
    return MachineSizing(model.name, ranks, source, geometry, tokens, tuple(lines + more), share)
