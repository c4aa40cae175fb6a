"""Options spelled the same across subcommands: the MHA head dim under both names in plan and replay,
a decimal --step-ms, and every size option's help saying how K and KiB differ."""

from __future__ import annotations

import argparse
import json

import pytest

from conformance.cli.main import build_parser, main
from conformance.common import args as types
from hal.units import HELP as UNITS

PLAN_MHA = ["plan", "--host-layout", "layer_first", "--attention", "mha", "--tokens", "4096", "--page-size", "16",
            "--layers", "2", "--heads", "4", "--json"]


def _json(capsys, args) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_takes_the_mha_head_dim_as_kv_dim_and_no_head_dim(capsys):
    by_kv = _json(capsys, [*PLAN_MHA, "--kv-dim", "64"])
    # 4096 tokens x 2 layers x 4 heads x 64 dims x 2 bytes (bf16) x 2 (K and V)
    assert by_kv["bytes"] == 4096 * 2 * 4 * 64 * 2 * 2
    assert main([*PLAN_MHA, "--head-dim", "64"]) == 2
    assert "unrecognized arguments: --head-dim" in capsys.readouterr().err


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": i * 10, "input_length": 1024, "output_length": 2, "hash_ids": [0, 1]} for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_replay_takes_the_mha_head_dim_as_kv_dim_and_head_dim_is_gone(capsys, trace):
    base = ["replay", "--trace", trace, "--attention", "mha", "--heads", "2", "--layers", "2", "--json", "--quiet"]
    by_kv = _json(capsys, [*base, "--kv-dim", "8"])
    assert by_kv["geometry"]["kv_dim"] == 8 and by_kv["d2h_bytes"] > 0
    default = _json(capsys, ["replay", "--trace", trace, "--layers", "2", "--json", "--quiet"])
    assert default["geometry"]["kv_dim"] == 576  # MLA's latent width when not given
    assert main([*base, "--head-dim", "8"]) == 2  # one spelling per concept: --kv-dim
    assert "unrecognized arguments: --head-dim" in capsys.readouterr().err


def test_step_ms_takes_a_positive_decimal(capsys, trace):
    fig = _json(capsys, ["replay", "--trace", trace, "--concurrency", "2", "--timestamps", "--step-ms", "2.5",
                         "--json", "--quiet"])
    assert fig["step_seconds"] == 0.0025
    # arrivals 0, 10, 20, 30 ms at 2.5 ms a step: admitted at steps 0, 4, 8, 12, each done 2 decode steps
    # later (one in flight at a time); the last finishes at step 14, so the run ends on step 15
    assert fig["steps"] == 15 and fig["max_in_flight"] == 1
    for bad in ("0", "-1", "abc", "nan", "60001"):
        assert main(["replay", "--trace", trace, "--concurrency", "2", "--step-ms", bad]) == 2
        assert capsys.readouterr().err.startswith("hicache: --step-ms: ")


def test_decimal_type():
    parse = types.decimal(100, " ms")
    assert parse("30") == 30.0 and parse("0.25") == 0.25 and parse("1_00") == 100.0
    for bad in ("0", "-2", "inf", "x", "101"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


SIZE_OPTIONS = {"--tokens", "--l1-tokens", "--l2-tokens", "--min-tokens", "--max-tokens", "--sizes", "--copy-size",
                "--pool-bytes", "--ghost-entries"}


def test_every_size_option_says_k_is_1000_and_kib_1024():
    assert "32K = 32,000" in UNITS and "32KiB = 32,768" in UNITS
    seen = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif getattr(action.type, "__name__", "") == "size" or set(action.option_strings) & SIZE_OPTIONS:
                seen.append(" ".join([*path, action.option_strings[0]]))
                assert UNITS in (action.help or ""), (path, action.option_strings, action.help)

    walk(build_parser(), [])
    assert {"plan --tokens", "bench transfer --tokens", "doctor --pool-bytes", "calibrate --sizes",
            "sweep --l2-tokens", "replay --l1-tokens"} <= set(seen)
