"""Replay figures that must not drift: bit-for-bit reproducible runs, and pinned figures on fixed
slices of both packaged traces (a change of behaviour shows here as a changed number)."""

import json

import pytest

import hicache_ref.direction_worker as direction_worker
from conformance.cli.main import main as cli_main
from hicache_ref.replay import replay
from hicache_ref.spec import CacheSpec
from hicache_ref.trace import find_trace, read_trace

WALL_KEYS = ("wall_seconds", "read_seconds", "tokens_per_second", "max_d2h_enqueue_seconds",
             "max_h2d_enqueue_seconds")


def _reproducible(figures: dict) -> dict:
    return {k: v for k, v in figures.items() if k not in WALL_KEYS}


@pytest.fixture(scope="module")
def conversation():
    return read_trace(find_trace("conversation_trace.jsonl"))


@pytest.fixture(scope="module")
def synthetic():
    return read_trace(find_trace("synthetic_trace.jsonl"))


def test_modeled_seconds_do_not_depend_on_how_timing_batched_the_transfers(conversation, monkeypatch):
    """Unlimited capacity applies completions as they come, so priced jobs are batched by thread
    timing; a batch priced as one plan rounds differently from its jobs (the 12th digit)."""
    runs = []
    for batch_max in (1, 7, 256):
        monkeypatch.setattr(direction_worker, "_BATCH_MAX", batch_max)
        runs.append(_reproducible(replay(CacheSpec(), conversation, 1500)))
    assert runs[0]["d2h_transfers"] > 100 and runs[0]["modeled_d2h_seconds"] > 0
    assert runs[1] == runs[0] and runs[2] == runs[0]


def test_two_default_replays_print_the_same_json_bit_for_bit(capsys):
    """The default run (whole conversation trace, unlimited) twice: identical but for wall time."""
    outs = []
    for _ in range(2):
        assert cli_main(["replay", "--json", "--quiet"]) == 0
        outs.append(_reproducible(json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1]
    assert outs[0]["requests"] > 10_000 and outs[0]["modeled_transfer_seconds"] > 0
