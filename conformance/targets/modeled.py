"""Measurers of the targets only a model can give here: the all-hit fit T(n) = a + b*n, the
break-even prompt length, and the registered-size slowdown (hicache_ref.sim.cost over the profile).

An all-hit request time needs a model server on the accelerator; the harness has none, so these
are `modeled`, with every profile key they read named, and `not_measured` when the profile
lacks the model.
"""

from __future__ import annotations

from conformance.targets.verdict import Outcome, model_inputs, not_measured
from hicache_ref.sim import cost

ALLHIT_KEYS = ("compute.allhit_fixed_s", "compute.allhit_per_token_s")
PREFILL_KEYS = ("compute.prefill_fixed_s", "compute.prefill_per_token_s")
NO_ALLHIT = "profile gives no all-hit model (compute.allhit_fixed_s, compute.allhit_per_token_s)"


def allhit_fit(ctx):
    return ctx.memo("allhit_fit", lambda: cost.allhit_fit(ctx.profile.compute))


def _fit_details(fit) -> dict:
    return {"fit": fit.to_json()}


def allhit_fixed_ms(ctx, target) -> Outcome:
    fit = allhit_fit(ctx)
    if fit is None:
        return not_measured("modeled", NO_ALLHIT)
    split = cost.split_allhit(fit.a, ctx.profile.compute)
    parts = "" if split is None else f" = {split.floor_s * 1e3:.1f} ms floor + {split.l2_path_s * 1e3:.1f} ms L2 path"
    return Outcome(fit.a * 1e3, "modeled", f"least-squares intercept over {len(fit.xs)} modeled all-hit points"
                   f" (R^2 {fit.r2:.4f}){parts}", model_inputs(ctx.profile, *ALLHIT_KEYS, "compute.prefill_fixed_s"),
                   _fit_details(fit))


def allhit_per_token_us(ctx, target) -> Outcome:
    fit = allhit_fit(ctx)
    if fit is None:
        return not_measured("modeled", NO_ALLHIT)
    return Outcome(fit.b * 1e6, "modeled", f"least-squares slope over {len(fit.xs)} modeled all-hit points "
                   f"(R^2 {fit.r2:.4f})", model_inputs(ctx.profile, *ALLHIT_KEYS), _fit_details(fit))


def break_even_tokens(ctx, target) -> Outcome:
    fit = allhit_fit(ctx)
    if fit is None:
        return not_measured("modeled", NO_ALLHIT)
    if not ctx.profile.compute.known:
        return not_measured("modeled", "profile gives no prefill model (compute.prefill_fixed_s, prefill_per_token_s)")
    n = cost.break_even_tokens(fit.a, fit.b, ctx.profile.compute)
    if n is None:
        return not_measured("modeled", "loading the cached KV never beats recomputing it under this compute model")
    return Outcome(n, "modeled", "where the all-hit fit meets prefill(n) of the compute model",
                   model_inputs(ctx.profile, *ALLHIT_KEYS, *PREFILL_KEYS), _fit_details(fit))


REGISTERED_GB = 15


def slowdown_pct_registered(ctx, target) -> Outcome:
    value = cost.registered_penalty_pct(ctx.profile.penalties, REGISTERED_GB * 10**9)
    if value is None:
        return not_measured("modeled", "profile gives no registered-size penalty "
                            "(penalties.registered_base_pct, registered_pct_per_gb)")
    return Outcome(value, "modeled", f"registered-size penalty line at {REGISTERED_GB} GB registered",
                   model_inputs(ctx.profile, *cost.REGISTERED_KEYS), {"registered_gb": REGISTERED_GB})
