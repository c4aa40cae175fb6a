"""The L3 tier (hicache_ref.l3.tier) on small constructed workloads over the real file store: each
prefetch policy, threshold and rate limit worked out by hand, the limit's default per rule and the
preset's switches, store answers it cannot use, writes that skip held pages, corrupt objects, MLA
rank-0 write-back, faults."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from hicache_ref.core.hashing import page_hashes
from hicache_ref.l3 import attach_l3
from hicache_ref.l3.policy import L3Link, Timeout
from hicache_ref.spec import CacheSpec, StorageSpec
from hicache_ref.storage.file import FileStorage, file_name
from hicache_ref.storage.keys import StorageIdentity

PS = 4
# 1 layer x 4 latent x bf16 = 8 bytes a token, 32 a page: one page per ms after a 1 ms round trip
LINK = L3Link(page_bytes=32, read_gbps=32e-6, write_gbps=32e-6, latency_s=1e-3)
A = np.arange(1000, 1040, dtype=np.uint32)  # 40 tokens: 10 pages
B = np.arange(5000, 5040, dtype=np.uint32)


def _spec(attention="mla", l1=64, l2=64):
    return CacheSpec.of(page_size=PS, l1_tokens=l1, l2_tokens=l2, attention=attention, layers=1,
                        heads=2 if attention == "mha" else 1, kv_dim=4, dtype="bf16", materialize=True,
                        write_policy="write_through")


class _Cache:
    """A small materialized HiCache with an L3 tier on `store` (closed on exit, the store kept)."""

    def __init__(self, store, attention="mla", l1=64, l2=64, **options):
        spec = _spec(attention, l1, l2)
        self.backend, _ = spec.open_backend()
        self.cache = spec.build(self.backend)
        options.setdefault("threshold_tokens", 8)
        options.setdefault("link", LINK)
        if not isinstance(options.get("policy", ""), str):  # a policy object with its own parameters
            options["policy_object"] = options.pop("policy")
        names = dict(policy="prefetch_policy", threshold_tokens="prefetch_threshold",
                     limit_tokens="prefetch_limit_tokens", slack_seconds="prefetch_slack_seconds",
                     limit_rule="prefetch_limit_rule")
        storage = StorageSpec(l3="memory:", key_scheme="harness",  # the tier's own trailer-checked objects
                              **{names[k]: options.pop(k) for k in list(options) if k in names})
        self.l3 = attach_l3(self.cache, storage, storage=store, policy=options.pop("policy_object", None), **options)

    def __enter__(self):
        return self.cache

    def __exit__(self, *exc):
        self.cache.close()
        self.backend.close()


def _keys(tokens, attention="mla", shard=""):
    return StorageIdentity(_spec(attention).geometry.kv(), shard=shard).keys(page_hashes(tokens, PS))


@pytest.fixture
def seeded(tmp_path):
    """A file store holding A's 10 pages, written back by a first cache."""
    store = FileStorage(str(tmp_path / "l3"))
    with _Cache(store) as c:
        c.request(A)
    assert store.exists(_keys(A)) == 10
    yield store
    store.close()


@pytest.mark.parametrize("policy, slack, l3_tokens, stall", [
    ("wait_complete", 0.0, 40, 11e-3),  # all 10 pages: 1 ms + 10 x 1 ms
    ("best_effort", 0.0, 0, 0.0),  # no queue time, nothing lands
    ("best_effort", 5.5e-3, 16, 0.0),  # (5.5 - 1) ms -> 4 pages, all within the slack
    (Timeout(base_s=2.5e-3, per_ki_token_s=0.1024), 0.0, 20, 6e-3),  # 2.5 + 4 ms -> 5 pages
    (Timeout(base_s=2.5e-3, per_ki_token_s=0.1024), 2e-3, 20, 4e-3),  # from issue: max(2, 6.5) ms -> 5 pages
    # 0.5.23: the budget starts at the first blocked poll, after the 2 ms slack: 8.5 ms -> 7 pages
    (Timeout(base_s=2.5e-3, per_ki_token_s=0.1024, start="first_blocked_poll"), 2e-3, 28, 6e-3),
])
def test_each_policy_uses_the_pages_the_modeled_clock_gives_it(seeded, policy, slack, l3_tokens, stall):
    with _Cache(seeded, policy=policy, slack_seconds=slack) as c:
        res = c.request(A)
        fig = c.l3.figures()
    assert (res.l1_hit_tokens, res.l2_hit_tokens, res.l3_hit_tokens) == (0, 0, l3_tokens)
    assert res.kv_mismatch_tokens == 0  # the fetched KV was checked bit for bit
    assert fig["l3_hit_tokens"] == l3_tokens and fig["l3_bytes_read"] == l3_tokens * 8
    assert fig["l3_modeled_stall_seconds"] == pytest.approx(stall)
    assert fig["l3_lookups"] == (0 if l3_tokens == 0 else 1)  # best_effort without slack never asks
    assert fig["l3_errors"] == 0


def test_threshold_and_rate_limit(seeded):
    with _Cache(seeded, threshold_tokens=48) as c:  # 40 missing tokens < 48: no prefetch
        assert c.request(A).l3_hit_tokens == 0
        assert c.l3.figures()["l3_lookups"] == 0
    with _Cache(seeded, limit_tokens=24) as c:  # cut to 6 pages
        assert c.request(A).l3_hit_tokens == 24
        assert c.l3.figures()["l3_rate_limited"] == 1


def test_the_decline_rule_never_cuts_a_prefetch(seeded):
    # 0.5.23 (prefetch_rate_limited): nothing in flight is under the limit, so the whole prefetch
    # runs, where the cut rule cuts it to the 24 tokens of room.
    with _Cache(seeded, limit_tokens=24, limit_rule="decline") as c:
        assert c.request(A).l3_hit_tokens == 40
        assert c.l3.figures()["l3_rate_limited"] == 0 and c.l3.figures()["l3_limit_rule"] == "decline"


SMALL = [np.arange(20000 + 100 * i, 20000 + 100 * i + 8, dtype=np.uint32) for i in range(9)]  # 2 pages each


def test_a_short_l2_evicts_by_the_whole_prefetch_as_upstream(seeded):
    # 0.5.23's allocate_storage_hit: a failed host allocation evicts L2 by the whole hit, not the
    # shortfall. 9 two-page prompts under write_through: L1 (10 pages) holds the last 5, L2 (24 pages)
    # all 18, so 6 pages are free and the first 4 prompts (8 pages) are host-only leaves. A's 10 pages
    # evict all 4 (a shortfall of 4 pages would take 2), leaving 6 + 8 - 10 = 4 pages free.
    with _Cache(seeded, l1=40, l2=96) as c:
        for s in SMALL:
            c.request(s)
        c.settle()
        assert c.tree.host.available_pages == 6
        assert c.request(A).l3_hit_tokens == 40
        assert c.tree.host.available_pages == 4
        again = c.request(SMALL[2])  # its host copy went with the eviction: read from L3 instead
        assert (again.l2_hit_tokens, again.l3_hit_tokens) == (0, 8)


@pytest.mark.parametrize("threshold, l3_tokens", [(8, 8), (12, 0)])
def test_a_partial_host_allocation_needs_the_threshold(seeded, threshold, l3_tokens):
    # L1 and L2 hold the same 5 prompts (nothing host-only to evict), 2 pages (8 tokens) free: upstream
    # takes them when they reach the prefetch threshold, else declines for host capacity.
    with _Cache(seeded, l1=40, l2=48, threshold_tokens=threshold) as c:
        for s in SMALL[:5]:
            c.request(s)
        c.settle()
        assert c.tree.host.available_pages == 2
        assert c.request(A).l3_hit_tokens == l3_tokens
        fig = c.l3.figures()
    assert (fig["l3_prefetches"], fig["l3_no_host_room"]) == ((1, 0) if l3_tokens else (0, 1))


def test_a_second_request_finds_prefetched_pages_in_l2_or_l1(seeded):
    with _Cache(seeded) as c:
        assert c.request(A).l3_hit_tokens == 40
        again = c.request(A)
    assert (again.l1_hit_tokens, again.l3_hit_tokens) == (40, 0)


def test_a_corrupt_object_is_a_miss_counted_and_never_kv(seeded):
    path = os.path.join(seeded.directory, file_name(_keys(A)[5]))
    with open(path, "r+b") as f:
        f.seek(3)
        byte = f.read(1)
        f.seek(3)
        f.write(bytes([byte[0] ^ 0xFF]))
    with _Cache(seeded) as c:
        res = c.request(A)
        fig = c.l3.figures()
    assert res.l3_hit_tokens == 20  # pages 0-4; page 5 is corrupt, so the run stops there
    assert res.kv_mismatch_tokens == 0
    assert fig["l3_corrupt_pages"] == 1 and fig["l3_miss_pages"] == 5


@pytest.mark.parametrize("attention, rank, size, written", [("mla", 0, 2, True), ("mla", 1, 2, False),
                                                           ("mha", 1, 2, True)])
def test_write_back_by_rank_zero_only_for_mla(tmp_path, attention, rank, size, written):
    store = FileStorage(str(tmp_path / "l3"))
    with _Cache(store, attention=attention, l1=128, l2=128, tp_rank=rank, tp_size=size) as c:
        c.request(A)
        c.request(B)
        c.settle()
    fig = c.l3.figures()
    shard = f"tp{rank}of{size}" if attention == "mha" else ""
    assert store.exists(_keys(A, attention, shard)) == (10 if written else 0)
    assert fig["l3_writes"] is written
    page_bytes = 4 * (8 if attention == "mla" else 32)  # MHA: K and V of 2 heads x 4 x bf16 per token
    assert fig["l3_bytes_written"] == (20 * page_bytes if written else 0)
    store.close()


C = np.arange(9000, 9040, dtype=np.uint32)


def _evict_a_then_ask_again(c):
    """A into L1, L2 and L3; B and C push it out of L1 (12 pages) and L2 (24 pages); then A again."""
    for t in (A, B, C):
        c.request(t)
    return c.request(A)


def test_store_unreachable_then_back(tmp_path):
    d = str(tmp_path / "l3")
    store = FileStorage(d)
    with _Cache(store, l1=48, l2=96) as c:
        assert _evict_a_then_ask_again(c).l3_hit_tokens == 40
        os.rename(d, d + ".away")  # the store goes away: a plain file where its directory was
        with open(d, "w"):
            pass
        D = np.arange(7000, 7040, dtype=np.uint32)
        res = [c.request(t) for t in (D, B, D, B)]  # writes fail: errors, backoff; requests go on
        fig = c.l3.figures()
        assert fig["l3_errors"] > 0 and all(r.kv_mismatch_tokens == 0 for r in res)
        assert res[2].l1_hit_tokens + res[2].l2_hit_tokens == 40  # L1 + L2 still serve
        os.unlink(d)
        os.rename(d + ".away", d)  # back
        hits = [c.request(t).l3_hit_tokens for t in (A, B, A, B, A)]
    assert any(h == 40 for h in hits)  # L3 serves again once the backoff has run out
    store.close()


class _StalledFileStorage(FileStorage):
    """The real file store whose lookups hang until `gate` opens (a store that stopped answering)."""

    def __init__(self, directory):
        super().__init__(directory)
        self.gate = threading.Event()
        self.gate.set()

    def _exists(self, keys):
        self.gate.wait()
        return super()._exists(keys)


def test_a_hung_store_costs_the_scheduler_one_deadline_then_is_skipped(tmp_path):
    store = _StalledFileStorage(str(tmp_path / "l3"))
    with _Cache(store, l1=48, l2=96, deadline_s=0.2) as c:
        for t in (A, B, C):
            c.request(t)  # A is now only in L3
        store.gate.clear()
        first = c.request(A)  # the lookup misses its deadline: A is recomputed
        assert first.l3_hit_tokens == 0 and c.l3.figures()["l3_errors"] >= 1  # the read (and a write) timed out
        c.request(B)  # in backoff: not asked
        assert c.l3.figures()["l3_skipped_down"] >= 1
        store.gate.set()  # answers again: the stuck calls return, the backoff runs out
        res = [c.request(t) for t in (C, A, B, C, A, B, C)]
    assert first.kv_mismatch_tokens == 0 and all(r.kv_mismatch_tokens == 0 for r in res)
    assert sum(r.l3_hit_tokens for r in res) > 0  # C, pushed out of L2 meanwhile, comes from L3 again
    store.close()


# -- the tier's own rules: limits by rule, the preset's defaults, answers it cannot use, writes ------

@pytest.mark.parametrize("rule, share", [("cut", 0.8), ("decline", 0.5)])
def test_the_rate_limit_defaults_to_its_rules_share_of_l2(tmp_path, rule, share):
    store = FileStorage(str(tmp_path / "l3"))
    with _Cache(store, l2=80, limit_rule=rule) as c:
        fig = c.l3.figures()
    assert (fig["l3_limit_rule"], fig["l3_limit_tokens"]) == (rule, int(80 * share))
    store.close()


def test_switches_a_storage_node_leaves_unset_are_the_default_presets(tmp_path):
    from hicache_ref.spec.presets import DEFAULT_PRESET, preset

    store = FileStorage(str(tmp_path / "l3"))
    with _Cache(store) as c:
        fig = c.l3.figures()
    want = preset(DEFAULT_PRESET)
    assert (fig["l3_limit_rule"], fig["l3_anchor_rule"]) == (want["prefetch_limit_rule"], want["prefetch_anchor"])
    store.close()


class _Answers(FileStorage):
    """The real file store, its lookups or reads answered by `exists_answer` / `get_answer` when set."""

    exists_answer = get_answer = None

    def exists(self, keys):
        return super().exists(keys) if self.exists_answer is None else self.exists_answer

    def get(self, keys, host_pool, pages):
        flags = super().get(keys, host_pool, pages)
        return flags if self.get_answer is None else self.get_answer(flags)


@pytest.mark.parametrize("answer", [True, 11, -1, 2.0, "10"])
def test_a_lookup_answer_no_store_could_give_is_an_error_and_the_request_goes_on(seeded, tmp_path, answer):
    store = _Answers(seeded.directory)
    store.exists_answer = answer
    with _Cache(store) as c:
        res = c.request(A)
        fig = c.l3.figures()
    assert res.l3_hit_tokens == 0 and res.kv_mismatch_tokens == 0
    assert fig["l3_errors"] >= 1 and "exists: answered" in fig["l3_last_error"]
    assert fig["l3_prefetches"] == 0  # nothing was read on it
    store.close()


@pytest.mark.parametrize("answer, l3_tokens", [
    (lambda flags: flags[:-1], 0),  # one flag short: malformed, nothing used
    (lambda flags: [1] * len(flags), 0),  # truthy is not True
    (lambda flags: flags[:3] + [False] + flags[4:], 12),  # a hole: the leading run only
])
def test_only_the_leading_run_of_true_in_a_read_answer_is_used(seeded, answer, l3_tokens):
    store = _Answers(seeded.directory)
    store.get_answer = answer
    with _Cache(store) as c:
        res = c.request(A)
        fig = c.l3.figures()
        leaked = c.tree.host.used_tokens - c.tree.tiers.host_pages * PS  # L2 pages the tree does not hold
    assert res.l3_hit_tokens == l3_tokens and res.kv_mismatch_tokens == 0
    assert fig["l3_miss_pages"] == 10 - l3_tokens // PS
    assert leaked == 0  # the pages read but not used went back to L2
    store.close()


def test_a_write_skips_the_pages_the_store_already_holds(seeded):
    with _Cache(seeded, l1=128, l2=128, threshold_tokens=48) as c:  # no prefetch: A computed, backed up again
        c.request(A)
        c.request(np.concatenate([A, B]))  # A's pages are held, B's are new
        c.settle()
    fig = c.l3.figures()
    # A's backup finds its 10 pages held and writes none; B's node (backed up alone) writes its 10
    assert (fig["l3_pages_present"], fig["l3_pages_written"]) == (10, 10)
    assert fig["l3_bytes_written"] == 10 * 32 and fig["l3_write_batches"] == 1
    assert seeded.exists(_keys(np.concatenate([A, B]))) == 20


@pytest.mark.parametrize("option, value", [("tp_rank", -1), ("tp_rank", True), ("deadline_s", 0)])
def test_bad_tier_options_are_refused_naming_them(seeded, option, value):
    with pytest.raises(ValueError, match=f"^{option}: "):
        with _Cache(seeded, **{option: value}):
            pass
