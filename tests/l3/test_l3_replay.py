"""Replay with an L3 on the real file store: a tiny L1 and L2 over a large L3 reach the unlimited
hit rate, figures reproducible bit for bit, a warm store serves a new process, and the CLI."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from conformance.cli.main import main as cli_main
from hicache_ref.sim.run.serial_replay import JSON_KEYS, replay
from hicache_ref.spec import CacheSpec

SMALL = dict(page_size=256, attention="mla", layers=1, kv_dim=4, dtype="bf16", materialize=True,
             write_policy="write_through")
TIERS = dict(l1_tokens=140_000, l2_tokens=280_000)  # the synthetic trace's longest request is 134,773 tokens
# l3_max_bytes: file:DIR without max_bytes is bounded by its filesystem's free space at open
WALL = {"wall_seconds", "read_seconds", "tokens_per_second", "l3_wait_wall_seconds", "l3", "l3_max_bytes"}


@pytest.mark.slow
def test_tiny_l1_l2_with_a_large_l3_reach_the_unlimited_hit_rate(synthetic, tmp_path):
    unlimited = replay(CacheSpec.of(**SMALL), synthetic, 1500)
    without = replay(CacheSpec.of(**SMALL, **TIERS), synthetic, 1500)
    fig = replay(CacheSpec.of(**SMALL, **TIERS, l3=f"file:{tmp_path}"), synthetic, 1500)
    assert without["hit_rate"] < unlimited["hit_rate"] - 0.1  # the tiers alone are far from it
    assert fig["hit_rate"] == pytest.approx(unlimited["hit_rate"], abs=0.01)
    assert fig["l3_hit_tokens"] > 0 and fig["l3_errors"] == 0 and fig["kv_mismatch_tokens"] == 0
    hits = fig["l1_hit_tokens"] + fig["l2_hit_tokens"] + fig["l3_hit_tokens"]
    assert fig["hit_rate"] == hits / fig["input_tokens"]  # hit_rate counts L3 hits
    assert fig["l3_bytes_read"] == fig["l3_pages_read"] * 256 * 8
    assert fig["l3_bytes_written"] > 0 and fig["l3_corrupt_pages"] == 0


@pytest.mark.slow
def test_l3_figures_are_reproducible_bit_for_bit(synthetic, tmp_path):
    figs = [replay(CacheSpec.of(**SMALL, **TIERS, l3=f"file:{tmp_path / str(i)}"), synthetic, 150) for i in range(2)]
    a, b = ({k: v for k, v in f.items() if k not in WALL and k != "spec" and not k.endswith("_enqueue_seconds")} for f in figs)
    assert a == b and a["l3_hit_tokens"] > 0


@pytest.mark.slow
def test_a_warm_store_serves_a_new_cache(synthetic, tmp_path):
    spec = CacheSpec.of(**SMALL, **TIERS, l3=f"file:{tmp_path}")
    first = replay(spec, synthetic, 60)
    again = replay(spec, synthetic, 60)  # a new process would see the same directory
    assert again["l3_hit_tokens"] > first["l3_hit_tokens"]
    assert again["hit_rate"] > first["hit_rate"] and again["kv_mismatch_tokens"] == 0
    assert again["l3_bytes_written"] < first["l3_bytes_written"]  # what it read it does not write again


def test_without_l3_the_l3_keys_are_zero(synthetic):
    fig = replay(CacheSpec.of(**SMALL, **TIERS), synthetic, 5)
    assert (fig["l3"], fig["l3_hit_tokens"], fig["l3_errors"], fig["l3_bytes_read"], fig["l3_bytes_written"]) == \
        (None, 0, 0, 0, 0)


def test_spec_refuses_an_l3_it_cannot_use():
    with pytest.raises(ValueError, match="^--l3: needs --materialize"):
        CacheSpec.of(l3="file:/tmp/x")
    with pytest.raises(ValueError, match="^--l3: needs an L2"):
        CacheSpec.of(**SMALL, l2_tokens=0, l3="file:/tmp/x")
    with pytest.raises(ValueError, match="^--l3: storage spec"):
        CacheSpec.of(**SMALL, l3="/tmp/x")
    with pytest.raises(ValueError, match="^--prefetch-policy"):
        CacheSpec.of(prefetch_policy="eager")
    with pytest.raises(ValueError, match="^--prefetch-slack-ms"):
        CacheSpec.of(prefetch_slack_seconds=-1.0)


def _cli(args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli_main(args)
    return rc, out.getvalue()


BASE_ARGS = ["replay", "--page-size", "256", "--attention", "mla", "--layers", "1", "--kv-dim", "4",
             "--materialize", "--write-policy", "write_through", "--l1-tokens", "140K", "--l2-tokens", "280K"]


@pytest.mark.slow
def test_cli_replay_with_l3(synthetic, tmp_path):
    rc, out = _cli([*BASE_ARGS, "--trace", str(synthetic), "--limit", "60", "--l3", f"file:{tmp_path}",
                    "--prefetch-policy", "timeout", "--json"])
    fig = json.loads(out)
    assert rc == 0 and set(JSON_KEYS) <= set(fig)
    assert fig["l3_prefetch_policy"] == "timeout" and fig["l3_hit_tokens"] > 0 and fig["l3_errors"] == 0
    rc, out = _cli([*BASE_ARGS, "--trace", str(synthetic), "--limit", "5", "--l3", f"file:{tmp_path}"])
    assert rc == 0 and "L3 file (wait_complete)" in out
    # best_effort in a serial replay has no queue time: it never asks; with slack it does
    rc, out = _cli([*BASE_ARGS, "--trace", str(synthetic), "--limit", "60", "--l3", f"file:{tmp_path}",
                    "--prefetch-policy", "best_effort", "--json"])
    assert rc == 0 and json.loads(out)["l3_lookups"] == 0 and json.loads(out)["l3_hit_tokens"] == 0
    rc, out = _cli([*BASE_ARGS, "--trace", str(synthetic), "--limit", "60", "--l3", f"file:{tmp_path}",
                    "--prefetch-policy", "best_effort", "--prefetch-slack-ms", "50", "--json"])
    slack = json.loads(out)
    assert rc == 0 and slack["l3_slack_seconds"] == 0.05 and slack["l3_hit_tokens"] > 0


@pytest.mark.parametrize("args, option", [
    (["--l3", "file:/tmp/x"], "--l3"),  # no --materialize
    (["--materialize", "--l3", "nope:x"], "--l3"),
    (["--materialize", "--l3", "file:/tmp/x", "--l2-tokens", "0"], "--l3"),
    (["--materialize", "--l3", "file:/tmp/x", "--concurrency", "2"], "--l3"),
    (["--prefetch-policy", "timeout"], "--prefetch-policy"),
    (["--prefetch-threshold", "5"], "--prefetch-threshold"),
])
def test_cli_bad_l3_input_names_the_option(synthetic, args, option, capsys):
    assert cli_main(["replay", "--trace", str(synthetic), "--limit", "1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {option}: ")
