"""`hicache sweep --method replay --engine`: every L2 tier replayed on the chosen engine; NOT RUN
(exit 3, the reason on stdout) where that engine cannot run here, as `hicache replay` says it."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hicache_ref.engines.sglang.pin import SEMANTICS_PRESET, unavailable_reason

_WHY = unavailable_reason()
# A small sweep: one layer of a 128-wide latent keeps SGLang's real pools cheap.
ARGS = ["sweep", "--limit", "20", "--layers", "1", "--kv-dim", "128", "--l1-tokens", "16K", "--l2-tokens", "32K,64K",
        "--semantics", SEMANTICS_PRESET, "--method", "replay", "--quiet"]


def test_another_engine_needs_method_replay(capsys):
    args = [a for a in ARGS if a not in ("--method", "replay")]
    assert main(args + ["--engine", "sglang"]) == 2
    assert "hicache: --engine: sglang replays each tier: it needs --method replay (got auto)" in capsys.readouterr().err


@pytest.mark.skipif(_WHY is None, reason="sglang is installed here: the NOT RUN path cannot be seen")
def test_absent_sglang_sweep_is_not_run_with_the_reason(capsys):
    assert main(ARGS + ["--engine", "sglang"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("hicache sweep: NOT RUN: engine sglang: ") and _WHY in out


@pytest.mark.needs_sglang
@pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")
def test_sglang_sweep_replays_every_tier_on_sglang_and_matches_the_preset(capsys):
    assert main(ARGS + ["--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert main(ARGS + ["--json", "--engine", "sglang"]) == 0
    up = json.loads(capsys.readouterr().out)
    assert (up["engine"], up["l1_alone_engine"], up["method"]) == ("sglang", "reference", "replay")
    assert "engine" not in ref
    assert up["l1_alone_hit_rate"] == ref["l1_alone_hit_rate"]
    assert [t.keys() for t in up["tiers"]] == [t.keys() for t in ref["tiers"]]
    # The preset models SGLang's release (the differential suite, request by request): the
    # tiers' hits and transfers agree; the bytes show that the HAL moved them.
    for key in ("l2_tokens", "hit_rate", "l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens"):
        assert [t[key] for t in up["tiers"]] == [t[key] for t in ref["tiers"]], key
    assert sum(t["d2h_tokens"] for t in up["tiers"]) > 0
    assert all(t["d2h_bytes"] == t["d2h_tokens"] * 128 * 2 for t in up["tiers"])
