"""A hostile pass on the modeled intervals (docs/hostile-cases.md, round 4): a profile that
`calibrate --prefill` wrote is priced with an ensemble spread around its own measured values; a
central value never lies outside its own interval, so the answer word never contradicts it."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.cli.main import main
from hardware_profiles import load_profile
from hicache_ref.sim.price import spread, uncertainty

LENGTHS = (1000, 2000, 4000, 8000, 16000, 32000)


def _calibrated(tmp_path, base: str = "p800"):
    rng = np.random.default_rng(11)
    rows = "".join(f"{n},{(0.05 + 2e-5 * n + 3e-10 * n * n) * 1e3 * (1 + rng.normal(0, 0.01)):.4f}\n"
                   for n in LENGTHS for _ in range(4))
    (tmp_path / "nohit.csv").write_text("input_len,ttft_ms\n" + rows)
    out = tmp_path / "mine.yaml"
    assert main(["calibrate", "--prefill", str(tmp_path / "nohit.csv"), "--profile", base, "--out", str(out)]) == 0
    return load_profile(out)


def test_a_calibrated_profile_with_readings_draws_its_members_around_its_measured_values(tmp_path):
    """A p800 profile whose prefill `calibrate --prefill` measured still names p800's readings: its
    ensemble was an internal error (the measured pair term also a jointly fitted one), and the
    derivation's exact step would have put every member back on the seed's prefill."""
    p = _calibrated(tmp_path)
    members = spread.members(p)
    assert len(members) == uncertainty.ENSEMBLE_SIZE
    for key in ("prefill_fixed_s", "prefill_per_token_s", "prefill_per_token_pair_s"):
        value, se = getattr(p.compute, key), p.stderrs[f"compute.{key}"]
        drawn = np.array([getattr(m.compute, key) for m in members[1:]])
        assert np.all(np.abs(drawn - value) <= 6 * se + 1e-15), (key, value, se, drawn.min(), drawn.max())
        assert drawn.std() > 0  # drawn, not held


def test_a_calibrated_profile_answers_replay_and_advise(tmp_path, capsys):
    p = _calibrated(tmp_path)
    capsys.readouterr()
    common = ["--limit", "30", "--l1-tokens", "64K", "--profile", str(p.path)]
    assert main(["replay", "--l2-tokens", "256K", *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("answer: ") and "not modeled" not in out.splitlines()[0], out
    assert main(["advise", "--quiet", *common]) == 0
    assert "internal error" not in capsys.readouterr().err


@pytest.mark.parametrize("values", [
    [-2.22, -2.0, -1.9, -1.5, 0.5, 1.0, 1.2, 1.17] * 4,  # member 0 below every other member
    [5.0, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8] * 3,  # member 0 above
    [0.1, -3.0, -2.0, -1.0, -0.5, -0.2] * 5])
def test_the_central_value_lies_inside_its_interval(values):
    """A central value outside its 5-95% interval (`TTFT -2.22% [-2.17%, +1.17%]`) read as a broken
    figure, broke ablate's plot (negative error bars) and could give a word of the other sign."""
    values = [values[0]] + values[1:]
    lo, hi = uncertainty.central_interval(values)
    assert lo <= values[0] <= hi
    p_lo, p_hi = uncertainty.interval(values)
    assert lo == min(p_lo, values[0]) and hi == max(p_hi, values[0])


def test_every_spread_figure_holds_its_central_value():
    """spread(): busy seconds, net benefit and TTFT change, member 0 at an extreme of the ensemble."""
    ens = list(range(20))

    def price(m):  # member 0 the cheapest by far: its TTFT change and net benefit the extremes
        busy = 1.0 if m == 0 else 10.0 + m
        return busy, 12.0, (busy / 12.0 - 1) * 100

    fig = spread.spread(ens, price)
    for key, central in (("ttft_change_pct_interval", fig["ttft_change_pct"]),
                         ("busy_seconds_interval", fig["busy_seconds"]),
                         ("net_benefit_seconds_interval", 12.0 - fig["busy_seconds"])):
        lo, hi = fig[key]
        assert lo <= central <= hi, (key, central, lo, hi)
    assert fig["answer"] == "undecided"  # central a gain, every other member a loss: not a sure loss
