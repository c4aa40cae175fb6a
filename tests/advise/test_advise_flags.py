"""The launch flags advise prints: SGLang 0.5.23's own parser takes every one (where SGLang is installed), and each names the value the candidate was priced with."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from hardware_profiles import load_profile
from hicache_ref.advise.flags import host_settings, launch_flags
from hicache_ref.advise.space import Candidate, layout_io_pairs, write_policies

_SGLANG = importlib.util.find_spec("sglang") is not None


def _every_candidate():
    for attention in ("mla", "mha"):
        for (layout, io) in layout_io_pairs(attention):
            for policy in write_policies():
                for l3 in (False, True):
                    yield Candidate(layout, io, policy, 2.0, 1 << 20, l3=l3)


def _value(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


def test_flags_name_the_priced_values():
    for c in _every_candidate():
        flags = launch_flags(c, 64, 8, 0.85, "wait_complete")
        assert "--enable-hierarchical-cache" in flags
        assert _value(flags, "--hicache-mem-layout") == c.layout and _value(flags, "--hicache-io-backend") == c.io_backend
        assert _value(flags, "--hicache-write-policy") == c.write_policy and float(_value(flags, "--hicache-ratio")) == 2.0
        assert ("--hicache-storage-backend" in flags) == c.l3
    c = Candidate("layer_first", "kernel", "write_through", 2.0, 1 << 20, tp_shared=True)
    lines = host_settings(c, load_profile("p800"), 8, 1000)
    assert any("one host copy for the TP group of 8" in s for s in lines) and any("IDO" in s for s in lines)


@pytest.mark.needs_sglang
@pytest.mark.skipif(not _SGLANG, reason="SGLang is not installed here (ci/install-sglang.sh builds .venv-sglang)")
def test_sglangs_own_parser_takes_every_flag():
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    for c in _every_candidate():
        ns = parser.parse_args(["--model-path", "model", *launch_flags(c, 64, 8, 0.85, "wait_complete")])
        assert ns.enable_hierarchical_cache and ns.hicache_mem_layout == c.layout
        assert ns.hicache_io_backend == c.io_backend and ns.hicache_write_policy == c.write_policy
        assert ns.hicache_ratio == 2.0 and ns.page_size == 64 and ns.tp_size == 8
        assert (ns.hicache_storage_backend == "mooncake") == c.l3
