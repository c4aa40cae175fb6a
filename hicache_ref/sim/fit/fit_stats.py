"""How well a least-squares fit determines its parameters: the Jacobian at the optimum, the
covariance it implies, and which observations carry each parameter.

Residuals are in units of each observation's standard error (the derivation divides by the
reading's tolerance), so the covariance is (J^T J)^-1, scaled up by the reduced chi-square when
the residuals are larger than their errors say (never down: a fit that happens to land close
does not make the parameters surer than the errors allow).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

REL_STEP = 1e-4  # finite-difference step, as a share of the parameter's scale
CARRY_SHARE = 0.05  # an observation "determines" a parameter when it holds this share of its column
MIN_DETERMINING = 2  # fewer observations than this determining a parameter: flagged


def jacobian(fun: Callable[[np.ndarray], np.ndarray], x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             scale: np.ndarray) -> np.ndarray:
    """d fun / d x by central differences (one-sided at a bound), steps REL_STEP x max(|x|, scale)."""
    cols = []
    for j in range(len(x)):
        h = REL_STEP * max(abs(float(x[j])), float(scale[j]))
        up, down = x.copy(), x.copy()
        up[j], down[j] = min(x[j] + h, hi[j]), max(x[j] - h, lo[j])
        cols.append((fun(up) - fun(down)) / (up[j] - down[j]))
    return np.column_stack(cols)


def covariance(jac: np.ndarray, residuals: np.ndarray) -> tuple[np.ndarray, float]:
    """(covariance of the parameters, the factor applied: max(1, reduced chi-square)).
    A direction the observations do not constrain gets the pseudo-inverse's zero, so callers
    flag it through `determining` rather than trusting a zero variance."""
    m, n = jac.shape
    dof = m - n
    chi2 = float(residuals @ residuals) / dof if dof > 0 else 1.0
    s2 = max(1.0, chi2)
    norms = np.linalg.norm(jac, axis=0)
    d = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)  # columns to unit norm:
    js = jac * d  # parameters of very different scales (1e-9 s per pair, 100 us) stay invertible
    return d[:, None] * np.linalg.pinv(js.T @ js) * d[None, :] * s2, s2


def determining(jac: np.ndarray, names: Sequence[str]) -> list[list[str]]:
    """For each parameter (column), the observations whose squared sensitivity is at least
    CARRY_SHARE of the column's sum, largest first."""
    out = []
    for j in range(jac.shape[1]):
        w = jac[:, j] ** 2
        total = float(w.sum())
        order = np.argsort(-w, kind="stable")
        out.append([names[i] for i in order if total > 0 and w[i] / total >= CARRY_SHARE])
    return out


@dataclass(frozen=True)
class Estimate:
    """One fitted parameter: its value, standard error, the observations that determine it, and
    whether it sits at a bound of the fit (then its standard error understates what is unknown)."""

    key: str
    value: float
    stderr: float
    determined_by: tuple[str, ...]
    at_bound: bool

    @property
    def weakly_determined(self) -> bool:
        return len(self.determined_by) < MIN_DETERMINING or self.at_bound

    def to_json(self) -> dict:
        return {"key": self.key, "value": self.value, "stderr": self.stderr,
                "determined_by": list(self.determined_by), "at_bound": self.at_bound,
                "weakly_determined": self.weakly_determined}
