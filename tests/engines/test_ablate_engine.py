"""`hicache ablate --engine`: each rung replayed on the chosen engine; a rung needing a switch that
engine does not run is not measured with the reason (never another engine's figure); NOT RUN
(exit 3, the reason on stdout) where the engine cannot run here, as `hicache replay` says it."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hicache_ref.engines import LadderEngine
from hicache_ref.engines.sglang.pin import SEMANTICS_PRESET, unavailable_reason
from hicache_ref.sim.ladder.ablate import REPLAYED_KEYS, ablate
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

_WHY = unavailable_reason()
# One layer of a 128-wide latent keeps SGLang's real pools cheap.
GEOMETRY = dict(layers=1, kv_dim=128)
# Under a 1 MiB memory budget SGLang's real pools (16 MiB here) cannot be built: the reason.
BUDGET = "1MiB"
NOT_RUN_PREFIX = (
    f"NOT RUN: engine sglang: {_WHY}"
    if _WHY is not None
    else "NOT RUN on engine sglang: --l1-tokens: the sglang engine needs ~"
)
REFUSED = {"l3_pooled", "per_request_hits", "plateau_capacity"}  # the model L3 (and the ghost list) on top
# the L3 rung prices a model: store, which upstream has no counterpart of
L3_NOT_RUN = ("NOT RUN on engine sglang: --l3: the sglang engine runs upstream's own stores: file:DIR "
              "(HiCacheFile) or mooncake:... (MooncakeStore); model: is the reference engine's")
ARGS = ["ablate", "--limit", "20", "--layers", "1", "--kv-dim", "128", "--quiet", "--json"]


def test_bad_engine_is_one_line_naming_the_option(capsys):
    assert main(["ablate", "--engine", "vllm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hicache: --engine: ") and "vllm" in err and err.count("\n") == 1


@pytest.mark.skipif(_WHY is None, reason="sglang is installed here: the NOT RUN path cannot be seen")
def test_absent_sglang_ablate_is_not_run_with_the_reason(capsys):
    assert main(ARGS + ["--engine", "sglang"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("hicache ablate: NOT RUN: engine sglang: ") and _WHY in out


@pytest.mark.slow
def test_rungs_the_engine_refuses_are_not_measured_with_the_reason(monkeypatch):
    # Pools over the memory budget are refused by the sglang engine (its pools are real): every
    # HiCache-on rung of this served ladder is refused before anything is built, for that reason
    # or (SGLang absent, as the API is called here without the command's check) for SGLang's
    # absence; HiCache off stays the reference's.
    requests = read_trace(find_trace("conversation_trace.jsonl"), 20)
    spec = CacheSpec.of(concurrency=4, **GEOMETRY)
    ref = ablate(spec, requests)
    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", BUDGET)
    up = ablate(spec, requests, engine=LadderEngine("sglang"))
    assert [s.keys() for s in up["steps"]] == [s.keys() for s in ref["steps"]]
    assert all(ref["steps"][0][k] is not None for k in ("hit_rate", "d2h_bytes"))
    for s in up["steps"]:
        assert all(s[k] is None for k in REPLAYED_KEYS), s["step"]
        assert set(s["not_measured"]) == set(REPLAYED_KEYS)
        reasons = {*s["not_measured"].values()}
        # the rungs on the model L3 are refused for it first (hicache_ref.engines.sglang.engine_replay)
        prefix = L3_NOT_RUN if _WHY is None and s["step"] in REFUSED else NOT_RUN_PREFIX
        assert len(reasons) == 1 and reasons.pop().startswith(prefix), (s["step"], reasons)
    c = up["configuration"]
    assert (c["engine"], c["l1_only_engine"]) == ("sglang", "reference") and "engine" not in ref[
        "configuration"
    ]
    assert c["hit_rate_l1_only"] == ref["configuration"]["hit_rate_l1_only"]
    assert c["sweep_hit_rates"] is None and c["plateau_l2_tokens"] is None


@pytest.fixture(scope="module")
def sglang_ladder():
    """The ladder on SGLang (the command) and on the reference with SGLang's preset (the API: the
    command takes no --semantics), one run each for every assert below."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(ARGS + ["--engine", "sglang"])
    assert rc == 0
    ref = ablate(
        CacheSpec.preset(SEMANTICS_PRESET, **GEOMETRY), read_trace(find_trace("conversation_trace.jsonl"), 20)
    )
    return json.loads(out.getvalue()), ref




@pytest.mark.needs_sglang
@pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")
def test_sglang_rungs_match_the_preset_where_the_differential_suite_says(sglang_ladder):
    up, ref = sglang_ladder
    ran = [s for s in up["steps"] if s["step"] not in REFUSED]
    assert [s["step"] for s in ran] == [
        "baseline",
        "layer_first",
        "daemon_threads",
        "thp",
        "numa",
        "tp_shared",
    ]
    by = {s["step"]: s for s in ref["steps"]}
    # Hits and the tokens backed up and loaded back agree (the differential suite, request by
    # request); bytes are those tokens' rows, so they agree too. Segments are the engines' own.
    for s in ran:
        assert s["not_measured"] == {}, s["step"]
        for key in ("hit_rate", "d2h_bytes", "h2d_bytes", "l2_tokens"):
            assert s[key] == by[s["step"]][key], (s["step"], key)
    assert ran[0]["hit_rate"] > 0 and ran[0]["d2h_bytes"] > 0


@pytest.mark.needs_sglang
@pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")
def test_sglang_refused_rungs_are_not_run_never_the_references(sglang_ladder):
    up, _ = sglang_ladder
    assert (up["configuration"]["engine"], up["configuration"]["l1_only_engine"]) == ("sglang", "reference")
    for s in up["steps"]:
        if s["step"] in REFUSED:
            assert all(s[k] is None for k in REPLAYED_KEYS), s["step"]
            assert {*s["not_measured"].values()} == {L3_NOT_RUN}
