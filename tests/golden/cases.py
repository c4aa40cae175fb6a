"""The pinned slices whose JSON figures a refactor must leave unchanged (tests/project/test_golden_figures.py).

Each case is a `hicache` command line with --json; `python tests/golden/capture.py` rewrites the
fixtures beside this file (run it only when a change is meant to move a figure, and say so)."""

from __future__ import annotations

CONV = "conversation_trace.jsonl"
SYNTH = "synthetic_trace.jsonl"

# name: (argv after `hicache`, the packaged trace it reads)
CASES: dict[str, tuple[list[str], str]] = {
    "replay_unlimited": (["replay", "--limit", "300", "--profile", "emu"], CONV),
    "replay_sliced": (["replay", "--limit", "400", "--l1-tokens", "60K", "--l2-tokens", "1M",
                       "--write-policy", "write_through", "--profile", "emu"], CONV),
    "replay_seed_pd": (["replay", "--limit", "400", "--l1-tokens", "60K", "--l2-tokens", "1M",
                        "--semantics", "seed", "--pd-disagg", "--profile", "p800"], CONV),
    "replay_sglang_0523_pd": (["replay", "--limit", "400", "--l1-tokens", "60K", "--l2-tokens", "1M",
                               "--semantics", "sglang-0.5.23", "--pd-disagg", "--profile", "p800"], CONV),
    "replay_kernel_page_first": (["replay", "--limit", "300", "--l1-tokens", "300K", "--l2-tokens", "900K",
                                  "--io-backend", "kernel", "--host-layout", "page_first", "--profile", "emu"], SYNTH),
    "replay_write_back_ghost": (["replay", "--limit", "300", "--l1-tokens", "300K", "--l2-tokens", "900K",
                                 "--write-policy", "write_back", "--ghost", "--profile", "p800"], SYNTH),
    "replay_served_pd": (["replay", "--limit", "200", "--l1-tokens", "300K", "--l2-tokens", "1M",
                          "--concurrency", "8", "--pd-disagg", "--timestamps", "--profile", "p800"], SYNTH),
    "replay_tp_shared_page16": (["replay", "--limit", "200", "--page-size", "16", "--l1-tokens", "30K",
                                 "--l2-tokens", "300K", "--tp", "4", "--shared-host", "--write-policy", "write_through", "--profile", "emu"], CONV),
    "replay_materialized_mha": (["replay", "--limit", "80", "--materialize", "--attention", "mha", "--layers", "2",
                                 "--heads", "2", "--kv-dim", "32", "--l1-tokens", "40K", "--l2-tokens", "80K",
                                 "--host-layout", "page_head", "--io-backend", "kernel", "--profile", "emu"], CONV),
    "sweep_one_pass": (["sweep", "--limit", "300", "--profile", "p800", "--l1-tokens", "200K",
                        "--l2-tokens", "300K,600K,1200K", "--write-policy", "write_through"], SYNTH),
    "ablate_served_tp": (["ablate", "--limit", "200", "--profile", "p800", "--l1-tokens", "200K",
                          "--l2-tokens", "400K", "--concurrency", "8", "--tp", "8"], CONV),
}

# The conform targets the model decides (basis modeled, or a plan's segment count): their values
# and verdicts; measured wall figures (a submit block, a ghost entry's RSS) are left out.
CONFORM_TARGETS = ["conform", "--backend", "emu", "--profile", "p800", "-k", "test_targets"]
CONFORM_DETERMINISTIC = ("plan_segments_",)

# Keys that vary run to run (wall clocks) or name where the run happened: never compared.
VOLATILE = {"wall_seconds", "read_seconds", "tokens_per_second", "max_d2h_enqueue_seconds",
            "max_h2d_enqueue_seconds", "trace", "elapsed_seconds"}
