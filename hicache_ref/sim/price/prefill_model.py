"""Prefill from first principles: a served model's FLOPs over a device's sustained throughput, mapped
onto the profile's compute terms.

A prefill of n prompt tokens after c cached does m matrix FLOPs per new token and p attention FLOPs
per (new token, token attended) pair, the token itself included (hicache_ref.models ModelArch). The
pairs are (n(n+1) - c(c+1)) / 2, so FLOPs = (m + p/2)(n - c) + (p/2)(n^2 - c^2) exactly. Split over a
TP group of `tp` ranks, each sustaining `mfu` of its peak, that is ComputeModel's
fixed + a (n - c) + b (n^2 - c^2) with R = tp x peak x mfu, a = (m + p/2) / R, b = (p/2) / R.
The fixed part is the profile's `compute.prefill_fixed_s` when given, else one read of a rank's
weights from HBM (a floor: every forward pass reads each weight once).
Pure arithmetic; the model in words: docs/model.md, "Prefill from first principles".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hardware_profiles.cost_models import ComputeModel
from hicache_ref.models.architecture import ModelArch
from hicache_ref.sim.price.mechanisms import Unpriced

MEASURE_PREFILL = "hicache calibrate --prefill TTFT.jsonl --profile {name} --out {name}-measured.yaml"
FIRST_PRINCIPLES_KEYS = ("device.peak_bf16_tflops", "device.hbm_gbps", "compute.prefill_mfu",
                         "compute.prefill_tp", "compute.prefill_model")


@dataclass(frozen=True)
class FirstPrinciples:
    """The compute terms of one model on one device, with what they were computed from."""

    model: str
    tp: int
    peak_tflops: float
    mfu: float
    matrix_flops_per_token: float  # m, the whole model (all ranks)
    attention_flops_per_pair: float  # p
    per_token_s: float  # a
    per_token_pair_s: float  # b
    fixed_s: float
    fixed_how: str

    @property
    def sustained_flops_per_s(self) -> float:
        """R: the TP group's FLOPs per second at the assumed MFU."""
        return self.tp * self.peak_tflops * 1e12 * self.mfu

    def seconds(self, tokens: int, cached: int = 0) -> float:
        return self.fixed_s + self.per_token_s * (tokens - cached) + self.per_token_pair_s * (
            tokens * tokens - cached * cached)

    def arithmetic(self) -> str:
        r = self.sustained_flops_per_s
        return (f"{self.model} at TP {self.tp}: m = {self.matrix_flops_per_token:.4g} FLOPs/token, p = "
                f"{self.attention_flops_per_pair:.4g} FLOPs/pair; R = {self.tp} x {self.peak_tflops:g} TFLOPS x MFU "
                f"{self.mfu:g} = {r:.4g} FLOP/s; a = (m + p/2) / R = {self.per_token_s * 1e6:.4g} us/token, "
                f"b = (p/2) / R = {self.per_token_pair_s:.4g} s/pair; fixed {self.fixed_s:.4g} s ({self.fixed_how})")


def terms(model: ModelArch, tp: int, peak_tflops: float, mfu: float, fixed_s: float | None = None,
          hbm_gbps: float | None = None) -> FirstPrinciples:
    """The prefill terms of `model` split over `tp` ranks of `peak_tflops` each at `mfu`. The fixed
    part: `fixed_s` when given, else a rank's weights read once at `hbm_gbps` (ValueError without either)."""
    if not (isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1):
        raise ValueError(f"tp: expected a positive integer, got {tp!r}")
    if not (peak_tflops > 0 and 0 < mfu <= 1):
        raise ValueError(f"peak_tflops, mfu: expected > 0 and in (0, 1], got {peak_tflops!r}, {mfu!r}")
    m, p = model.matrix_flops_per_token(), model.attention_flops_per_pair()
    r = tp * peak_tflops * 1e12 * mfu
    if fixed_s is not None:
        how = "the profile's compute.prefill_fixed_s"
    elif hbm_gbps is not None:
        w = model.weight_bytes_per_rank(tp)
        fixed_s = w / (hbm_gbps * 1e9)
        how = f"a floor: {w / 1e9:.4g} GB of weights per rank read once at {hbm_gbps:g} GB/s"
    else:
        raise ValueError("fixed_s, hbm_gbps: one is needed for the fixed part")
    return FirstPrinciples(model.name, tp, float(peak_tflops), float(mfu), m, p, (m + p / 2) / r, (p / 2) / r,
                           float(fixed_s), how)


def _missing(profile, what: str) -> Unpriced:
    return Unpriced(f"profile {profile.name} has no compute model (compute.prefill_*): {what}; "
                    f"measure it: {MEASURE_PREFILL.format(name=profile.name)}")


def first_principles(profile, model: ModelArch | str | None = None, tp: int | None = None) -> FirstPrinciples:
    """The first-principles terms for `profile`'s device and `model` (default: the profile's
    compute.prefill_model) over `tp` ranks (default: compute.prefill_tp, else devices_per_node).
    Unpriced naming the value that is missing and the command that measures the prefill instead."""
    from hicache_ref.models.catalog import load_model

    c, d = profile.compute, profile.device
    model = model if model is not None else c.prefill_model
    if model is None:
        raise _missing(profile, "no served model to count its FLOPs (compute.prefill_model)")
    arch = load_model(model) if isinstance(model, str) else model
    if arch.active_params is None or arch.heads is None:
        raise _missing(profile, f"model {arch.name} publishes no parameter count or attention shape")
    if d.peak_bf16_tflops is None:
        raise _missing(profile, f"device.peak_bf16_tflops of {d.model or 'its device'} is not known")
    if c.prefill_mfu is None:
        raise _missing(profile, "compute.prefill_mfu (the share of peak a prefill sustains) is not given")
    tp = tp if tp is not None else (c.prefill_tp or d.devices_per_node)
    if tp is None:
        raise _missing(profile, "no TP group size (compute.prefill_tp or device.devices_per_node)")
    if c.prefill_fixed_s is None and (d.hbm_gbps is None or arch.total_params is None):
        raise _missing(profile, "no fixed part (compute.prefill_fixed_s, or device.hbm_gbps and the model's weights)")
    return terms(arch, tp, d.peak_bf16_tflops, c.prefill_mfu, c.prefill_fixed_s, d.hbm_gbps)


def require_compute(profile, model=None, tp=None) -> ComputeModel:
    """The compute model prefill is priced with: the profile's own terms (measured, derived or a
    curve) when they are known, else first principles (Unpriced naming what is missing)."""
    c = profile.compute
    if c.known and model is None:
        return c
    fp = first_principles(profile, model, tp)
    return dataclasses.replace(c, prefill_fixed_s=fp.fixed_s, prefill_per_token_s=fp.per_token_s,
                               prefill_per_token_pair_s=fp.per_token_pair_s, prefill_curve=None,
                               prefill_model=fp.model, prefill_tp=fp.tp)


def compute_of(profile, model=None, tp=None) -> ComputeModel | None:
    """`require_compute`, or None where the profile cannot price a prefill (or there is no profile)."""
    if profile is None:
        return None
    try:
        return require_compute(profile, model, tp)
    except Unpriced:
        return None


def seed_ratio(profile, model: ModelArch | str = "deepseek-v3", tp: int = 8) -> dict:
    """First principles against a profile's derived terms (on p800, the seed's): the ratio b/a, which
    needs no device figure, and the TFLOPS per rank the derived a and b each imply for `model` at
    `tp`; with the device's peak and MFU known, also a and b themselves and their ratios. Reported,
    never fitted: a ratio far from 1 says the model or the derivation is off, not which."""
    from hicache_ref.models.catalog import load_model

    arch = load_model(model) if isinstance(model, str) else model
    c = profile.compute
    if c.prefill_per_token_s is None or not c.prefill_per_token_pair_s:
        raise Unpriced(f"profile {profile.name} has no derived prefill terms to compare (compute.prefill_per_token_s, "
                       "compute.prefill_per_token_pair_s)")
    m, p = arch.matrix_flops_per_token(), arch.attention_flops_per_pair()
    a_flops, b_flops = (m + p / 2) / tp, p / 2 / tp  # per rank
    out = {"model": arch.name, "tp": tp, "profile": profile.name,
           "seed_per_token_s": c.prefill_per_token_s, "seed_per_token_pair_s": c.prefill_per_token_pair_s,
           "shape_b_over_a_first_principles": b_flops / a_flops,
           "shape_b_over_a_seed": c.prefill_per_token_pair_s / c.prefill_per_token_s,
           "implied_tflops_per_rank_from_a": a_flops / c.prefill_per_token_s / 1e12,
           "implied_tflops_per_rank_from_b": b_flops / c.prefill_per_token_pair_s / 1e12}
    out["shape_ratio_seed_over_first_principles"] = out["shape_b_over_a_seed"] / out["shape_b_over_a_first_principles"]
    d = profile.device
    if d.peak_bf16_tflops is not None and c.prefill_mfu is not None:
        fp = terms(arch, tp, d.peak_bf16_tflops, c.prefill_mfu, fixed_s=c.prefill_fixed_s or 0.0)
        out.update(a_ratio_first_principles_over_seed=fp.per_token_s / c.prefill_per_token_s,
                   b_ratio_first_principles_over_seed=fp.per_token_pair_s / c.prefill_per_token_pair_s)
    else:
        missing = "device.peak_bf16_tflops" if d.peak_bf16_tflops is None else "compute.prefill_mfu"
        out["a_b_ratio_not_computed"] = (f"{missing} of {d.model or profile.name} is not known: a and b themselves "
                                         "need peak x MFU; the implied TFLOPS above are what peak x MFU would have to be")
    return out


def prefill_from_moments(compute_model, moments) -> float:
    """Prefill seconds of a run's prompts (its `prefill_moments` entry) under a linear + pair model."""
    count, new, pairs = moments
    return (count * compute_model.prefill_fixed_s + new * compute_model.prefill_per_token_s
            + pairs * (compute_model.prefill_per_token_pair_s or 0.0))


def main() -> None:
    """Print the p800 check (docs/model.md quotes it)."""
    import json

    from hardware_profiles import load_profile

    print(json.dumps(seed_ratio(load_profile("p800")), indent=1))


if __name__ == "__main__":
    main()

