"""The L3 tier of a HiCache: prefetch on match, write-back after backup, faults.

`prefetch` reads pages that miss L1 and L2 from the store into L2, between match and load-back.
`backed_up` / `written_back` copy pages out of L2 and write them to the store on its own thread.
Every figure comes from the store's answers and the modeled clock, so runs repeat.
A failing or slow store costs counted errors; the request goes on with L1 and L2.
The steps, rate limit and fault rules: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from hicache_ref.core.node import lock_path, node_hashes, unlock_path
from hicache_ref.l3.guard import FaultGuard
from hicache_ref.l3.host_nodes import missing_hashes
from hicache_ref.l3.io_threads import L3Job, L3Worker
from hicache_ref.l3.prefetch_policy import L3Link, PrefetchPolicy, make_prefetch_policy
from hicache_ref.l3.write_snapshot import StagedPages

DEFAULT_THRESHOLD_TOKENS = 256  # upstream's prefetch_threshold default
DEFAULT_DEADLINE_S = 5.0
MAX_HUNG_CALLS = 4  # store calls past their deadline, per direction, before L3 is no longer asked
LIMIT_SHARE_OF_L2 = 0.8  # default rate limit, tokens in flight: this share of L2 (upstream: 0.8 x (L2 - L1), later 0.5 x L2)
# The rate limit's rule: `cut` keeps in-flight tokens plus the new prefetch under 0.8 x L2, cutting
# it to fit; `decline` refuses a prefetch once in-flight tokens reach 0.5 x L2 and never cuts one
# (SGLang 0.5.23, managers/cache_controller.py prefetch_rate_limited).


class LimitRule(NamedTuple):
    """A rate limit's rule: its share of L2 in flight, and whether it declines (never cuts) a prefetch."""

    share_of_l2: float
    declines: bool


LIMIT_RULES = {"cut": LimitRule(LIMIT_SHARE_OF_L2, declines=False), "decline": LimitRule(0.5, declines=True)}
# Which matches a prefetch may extend: `any`, or `backed_up`: only a match whose last node has an L2
# copy, or an empty one (SGLang 0.5.23's scheduler asks L3 nothing past a prefix held in L1 only,
# since under write_through such a prefix means its continuation was never stored).
ANCHOR_NEEDS_BACKUP = {"any": False, "backed_up": True}  # whether the match's last node needs an L2 copy
ANCHOR_RULES = tuple(ANCHOR_NEEDS_BACKUP)


def _leading_true(flags, n: int) -> int | None:
    """Length of the leading run of True in a store's per-key answer; None if malformed."""
    if not isinstance(flags, (list, tuple)) or len(flags) != n:
        return None
    run = 0
    for f in flags:
        if f is not True:
            break
        run += 1
    return run


class L3Tier:
    """Prefetch, write-back and fault handling between a HiCache's L2 and a storage backend."""

    def __init__(self, storage, tree, host_pool, geom, key_fn, spec, *, link: L3Link | None = None,
                 tp_rank: int = 0, deadline_s: float = DEFAULT_DEADLINE_S, group_min=None,
                 owns_storage: bool = False, policy: PrefetchPolicy | None = None):
        """`spec`: the hicache_ref.spec.StorageSpec (prefetch policy, threshold, limit, slack), checked;
        `policy`: a PrefetchPolicy object used instead of the spec's policy by name."""
        if isinstance(tp_rank, bool) or not isinstance(tp_rank, int) or tp_rank < 0:
            raise ValueError(f"tp_rank: expected a non-negative integer, got {tp_rank!r}")
        if not deadline_s > 0:
            raise ValueError(f"deadline_s: expected positive seconds, got {deadline_s!r}")
        # A StorageSpec made outside a root spec leaves the preset's switches None: the default preset's.
        spec = spec.with_preset_defaults()
        for name in ("prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule", "prefetch_anchor"):
            if getattr(spec, name) is None:
                raise ValueError(f"spec.{name}: not resolved (give a StorageSpec, whose preset fills it)")
        self.policy = policy if policy is not None else make_prefetch_policy(spec.prefetch_policy,
                                                                             spec.prefetch_timeout_start)
        self.limit_rule = spec.prefetch_limit_rule
        self.anchor_rule = spec.prefetch_anchor
        self._limit, self._anchor_needs_backup = LIMIT_RULES[self.limit_rule], ANCHOR_NEEDS_BACKUP[self.anchor_rule]
        self.storage, self.tree, self.host, self.geom, self.key_fn = storage, tree, host_pool, geom, key_fn
        self.moves_bytes = getattr(storage, "moves_bytes", True)
        self.ps = geom.page_size
        self.page_bytes = geom.token_bytes * geom.page_size
        self.link = link or L3Link(self.page_bytes)
        self.threshold = spec.prefetch_threshold
        limit = spec.prefetch_limit_tokens
        self.limit = limit if limit is not None else int(host_pool.num_tokens * self._limit.share_of_l2)
        self.slack = float(spec.prefetch_slack_seconds)
        self.writes = not (geom.attention == "mla" and tp_rank != 0)
        self.deadline = deadline_s
        self.group_min = group_min or (lambda n: n)
        self.owns_storage = owns_storage
        self.guard = FaultGuard()
        self.reader, self.writer = L3Worker("hicache-l3-read"), L3Worker("hicache-l3-write")
        self._abandoned: list = []  # (job, host pages) of reads that missed their deadline
        self._writes: list = []  # [job, past its deadline] of writes not yet accounted for
        self._hung_reads: list = []  # read jobs past their deadline, not returned yet
        self.counters = dict(l3_hit_pages=0, l3_prefetches=0, l3_lookups=0, l3_miss_pages=0, l3_pages_read=0,
                             l3_pages_written=0, l3_pages_present=0, l3_rate_limited=0, l3_skipped_down=0,
                             l3_writes_skipped=0, l3_no_host_room=0, l3_write_batches=0, l3_unbacked_anchor=0)
        self.stall_seconds = 0.0  # modeled seconds requests waited for prefetches past their slack
        self.write_seconds = 0.0  # modeled link seconds of the writes (off the request path)
        self.wait_wall_seconds = 0.0  # wall seconds the scheduler thread waited on the store
        self._closed = False

    # -- helpers --------------------------------------------------------------------------------
    def _errors_of(self, fn):
        """fn wrapped to also return how many backend errors the store counted while it ran
        (the storage contract reports a failed call as a miss and counts it in its stats)."""
        stats = getattr(self.storage, "stats", None)

        def run():
            before = getattr(stats, "errors", 0)
            value = fn()
            return value, getattr(stats, "errors", 0) - before
        return run

    def _call(self, worker: L3Worker, fn, what: str):
        """Run fn on `worker`, waiting at most the deadline: (job, ok, value), errors counted."""
        t0 = time.perf_counter()
        job = self._submit(worker, self._errors_of(fn))
        finished, value, err = job.result(self.deadline)
        self.wait_wall_seconds += time.perf_counter() - t0
        if not finished:
            self.guard.failed(f"{what}: no answer within {self.deadline:g} s")
            self._hung_reads.append(job)
            self.reader = self._replace(worker, "read")  # the hung call keeps the old thread
            return job, False, None
        if err is not None:
            self.guard.failed(f"{what}: {type(err).__name__}: {err}")
            return job, False, None
        value, store_errors = value
        if store_errors:
            self.guard.failed(f"{what}: the store reported {store_errors} error(s)")
            return job, False, None
        return job, True, value

    def _submit(self, worker: L3Worker, fn) -> L3Job:
        """Queue fn on `worker`; a store that moves no bytes (hicache_ref.storage.model) answers at
        once, so its calls run here, in order, and every lookup sees every write before it."""
        if self.moves_bytes:
            return worker.submit(fn)
        job = L3Job(fn)
        try:
            job.value = fn()
        except Exception as e:  # the store's failure is the job's outcome, as on the worker
            job.error = e
        job.done.set()
        return job

    @staticmethod
    def _replace(worker: L3Worker, direction: str) -> L3Worker:
        """A fresh thread for `direction`; `worker` ends once its hung call returns."""
        worker.stop(timeout=0)
        return L3Worker(f"hicache-l3-{direction}")

    def _hung(self, jobs: list) -> int:
        jobs[:] = [j for j in jobs if not j.done.is_set()]
        return len(jobs)

    def _in_flight_tokens(self) -> int:
        return sum(len(p) for _, p in self._abandoned) * self.ps

    def _reap(self) -> None:
        """Return the host pages of abandoned reads whose call has come back."""
        keep = []
        for job, pages in self._abandoned:
            if job.done.is_set():
                self.host.allocator.free_pages(pages)
            else:
                keep.append((job, pages))
        self._abandoned = keep

    # -- prefetch ---------------------------------------------------------------------------------
    def prefetch(self, tokens, match):
        """Extend `match` (a PageMatch of `tokens`) with pages read from L3: (match, pages added)."""
        self.guard.tick()
        self._reap()
        ps, tree = self.ps, self.tree
        full = len(tokens) // ps
        missing = full - len(match.device_pages) - len(match.host_pages)
        if missing * ps < self.threshold or missing <= 0:
            return match, 0
        anchor = match.last_host_node
        if self._anchor_needs_backup and not (anchor is tree.root or anchor.backed_up):
            self.counters["l3_unbacked_anchor"] += 1
            return match, 0
        if self.policy.decide(self.link, missing, ps, self.slack)[0] * ps < max(self.threshold, 1):
            return match, 0  # the policy could use nothing even if L3 held it all: do not ask
        if not self.guard.available or self._hung(self._hung_reads) >= MAX_HUNG_CALLS:
            self.counters["l3_skipped_down"] += 1
            return match, 0
        in_flight = self._in_flight_tokens()
        room = (self.limit - in_flight) // ps
        if (in_flight >= self.limit) if self._limit.declines else room * ps < max(self.threshold, 1):
            self.counters["l3_rate_limited"] += 1
            return match, 0
        data = tree.keys.encode(tokens)  # the tree's spelling of the request's whole pages
        hashes = missing_hashes(tree, data, match, full)
        keys = self.key_fn(hashes)
        self.counters["l3_lookups"] += 1
        _, ok, held = self._call(self.reader, lambda: self.storage.exists(keys), "exists")
        if not ok:
            return match, 0
        if isinstance(held, bool) or not isinstance(held, (int, np.integer)) or not 0 <= held <= len(keys):
            self.guard.failed(f"exists: answered {held!r} for {len(keys)} keys")
            return match, 0
        self.guard.succeeded()
        held = int(held)
        if held * ps < max(self.threshold, 1):
            self.counters["l3_miss_pages"] += missing
            return match, 0
        used, _ = self.policy.decide(self.link, held, ps, self.slack)
        if used > room and not self._limit.declines:
            used = room
            self.counters["l3_rate_limited"] += 1
        if used * ps < max(self.threshold, 1):
            return match, 0
        pages = self._host_pages(match, used)
        if pages is None:
            self.counters["l3_no_host_room"] += 1
            return match, 0
        used = len(pages)
        self.counters["l3_prefetches"] += 1
        job, ok, flags = self._call(self.reader, lambda: self.storage.get(keys[:used], self.host, pages), "get")
        if not ok:
            if job.done.is_set():
                self.host.allocator.free_pages(pages)
            else:  # the thread may still write into these pages: hand them back once it returns
                self._abandoned.append((job, pages))
            return match, 0
        got = _leading_true(flags, used)
        if got is None:
            self.guard.failed(f"get: answered {type(flags).__name__} for {used} keys")
            got = 0
        got = min(got, int(self.group_min(got)))
        self.counters["l3_miss_pages"] += missing - got
        if got < used:
            self.host.allocator.free_pages(pages[got:])
        if got == 0:
            self.stall_seconds += max(0.0, self.link.read_seconds(used) - self.slack)
            return match, 0
        self.counters["l3_pages_read"] += got
        self.stall_seconds += max(0.0, self.link.read_seconds(used) - self.slack)  # it waited for all it asked
        return tree.insert_host_pages(data, match, pages[:got], hashes), got

    def _host_pages(self, match, used: int):
        """Host pages for `used` prefetched pages, as upstream's allocate_storage_hit: short, evict
        L2 by the whole hit (not the shortfall) and retry, then take what is free if that is at least
        the threshold; None when it is not."""
        tree, ps = self.tree, self.ps
        lock_path(tree.root, match.last_host_node)  # host eviction must not take the matched path
        try:
            pages = tree.host.alloc_pages(used)
            if pages is None:
                tree.tiers.evict_host(used * ps)
                pages = tree.host.alloc_pages(used)
            if pages is None:
                free = min(used, tree.host.available_pages)
                pages = tree.host.alloc_pages(free) if free and free * ps >= self.threshold else None
        finally:
            unlock_path(tree.root, match.last_host_node)
        return pages

    def hit(self, pages: int) -> None:
        """The request loaded `pages` of its prefetched pages to L1 (they count as L3 hits)."""
        self.counters["l3_hit_pages"] += pages

    # -- write-back -------------------------------------------------------------------------------
    def backed_up(self, copy) -> None:
        """A backup's D2H landed (copy: the tree's TierCopy): write its host pages to L3."""
        self._write(copy.nodes, copy.host_pages)

    def written_back(self, copies) -> None:
        """Eviction write-backs (write_back policy) whose D2H landed: write them to L3 too."""
        for t in copies:
            self._write(t.nodes, t.host_pages)

    def _write(self, nodes, host_pages) -> None:
        if not self.writes:
            return
        if not self.guard.available or sum(late for _, late in self._writes) >= MAX_HUNG_CALLS:
            self.counters["l3_writes_skipped"] += 1
            return
        hashes = [h for x in nodes for h in node_hashes(x, self.tree.keys)]
        if len(hashes) < len(host_pages) and nodes:
            hashes = self._path_hashes(nodes[-1], len(host_pages))
        keys = self.key_fn(hashes)
        if len(keys) != len(host_pages):
            raise RuntimeError(f"l3: {len(keys)} page keys for {len(host_pages)} backed-up pages")
        store = self.storage
        # the live L2 slots are free to go right after; the harness's trailers are sealed in the same
        # copy (upstream's objects are sealed, if at all, per object by the store; a store that moves
        # no bytes needs no copy)
        upstream = getattr(getattr(store, "object_format", None), "upstream", False)
        digest = None if upstream else getattr(store, "digest", None)
        staged = StagedPages(self.host, host_pages, keys, digest) if self.moves_bytes else None

        def write():
            present = store.exists(keys)
            rest = range(present, len(keys))
            return present, store.set(keys[present:], staged, rest) if len(rest) else []

        self._writes.append([self._submit(self.writer, self._errors_of(write)), False])

    def _path_hashes(self, node, count: int) -> list[bytes]:
        """The hashes of the last `count` pages of the path ending at `node`: a copy's pages when its
        nodes were split after it was issued (a served replay splits while a backup is in flight;
        the split's upper part is then an ancestor of the node the copy names)."""
        parts: list[list[bytes]] = []
        have = 0
        while node is not None and node is not self.tree.root and have < count:
            parts.append(node_hashes(node, self.tree.keys))
            have += len(parts[-1])
            node = node.parent
        flat = [h for part in reversed(parts) for h in part]
        return flat[len(flat) - count:] if len(flat) >= count else flat

    def settle(self, wait: bool) -> None:
        """Account for finished writes; with `wait`, first wait (up to the deadline) for all queued
        ones, so the next lookup sees every write queued before it (the replay's rule)."""
        end = time.perf_counter() + (self.deadline if wait else 0.0)
        keep = []
        for entry in self._writes:
            job, late = entry
            t0 = time.perf_counter()
            # a write already past its deadline is only polled: a hung store costs one deadline, not one a request
            finished, value, err = job.result(max(0.0, end - t0) if wait and not late else 0.0)
            self.wait_wall_seconds += time.perf_counter() - t0
            if not finished:
                if wait and not late:
                    entry[1] = True
                    self.guard.failed(f"set: no answer within {self.deadline:g} s")
                    self.writer = self._replace(self.writer, "write")  # later writes go to a fresh thread
                keep.append(entry)
                continue
            if err is not None:
                self.guard.failed(f"set: {type(err).__name__}: {err}")
                continue
            (present, flags), store_errors = value
            if store_errors:
                self.guard.failed(f"set: the store reported {store_errors} error(s)")
            stored = sum(1 for f in flags if f is True)
            self.counters["l3_pages_present"] += int(present)
            self.counters["l3_pages_written"] += stored
            self.counters["l3_write_batches"] += 1 if stored else 0
            self.write_seconds += self.link.write_seconds(stored)
        self._writes = keep

    # -- figures and teardown ------------------------------------------------------------------------
    def figures(self) -> dict:
        c = self.counters
        out = dict(l3_hit_tokens=c["l3_hit_pages"] * self.ps, l3_errors=self.guard.errors,
                   l3_bytes_read=c["l3_pages_read"] * self.page_bytes,
                   l3_bytes_written=c["l3_pages_written"] * self.page_bytes,
                   l3_modeled_stall_seconds=self.stall_seconds, l3_modeled_write_seconds=self.write_seconds,
                   l3_wait_wall_seconds=self.wait_wall_seconds, l3_last_error=self.guard.last_error,
                   l3_prefetch_policy=self.policy.name, l3_threshold_tokens=self.threshold,
                   l3_limit_tokens=self.limit, l3_limit_rule=self.limit_rule,
                   l3_anchor_rule=self.anchor_rule, l3_slack_seconds=self.slack,
                   l3_link=self.link.report(),
                   l3_writes=self.writes)
        out.update({k: v for k, v in c.items() if k != "l3_hit_pages"})
        stats = getattr(self.storage, "stats", None)
        out["l3_corrupt_pages"] = getattr(stats, "corrupt", 0)
        out["l3_unverified_pages"] = getattr(stats, "unverified", 0)  # read whole, no trailer to check
        out["l3_store_errors"] = getattr(stats, "errors", 0)
        out["l3_full_pages"] = getattr(stats, "full", 0)  # pages a full store had no room for (not errors)
        out["l3_storage"] = getattr(self.storage, "name", type(self.storage).__name__)
        out["l3_max_bytes"] = getattr(self.storage, "max_bytes", None)  # the store's bound; None: the store's own
        if (why := getattr(self.storage, "last_error", None)) is not None:  # which file and why (file store)
            out["l3_store_last_error"] = why
        if not self.moves_bytes:  # the model store: its bound in tokens and what it holds at the end
            out["l3_max_tokens"] = getattr(self.storage, "max_tokens", None)
            out["l3_stored_pages"] = getattr(self.storage, "stored_objects", None)
        return out

    def close(self, timeout: float = 30.0) -> bool:
        """Apply the writes, stop both threads; False if a thread is still in a store call
        (then the host pool must stay open: that call may still touch it)."""
        if self._closed:
            return True
        self._closed = True
        self.settle(wait=True)
        stopped = self.reader.stop(timeout) and self.writer.stop(max(0.1, timeout / 2))
        self._reap()
        clean = stopped and not self._writes and not self._abandoned
        if clean and self.owns_storage:
            self.storage.close()
        return clean
