"""Radix tree of the reference HiCache: which prefix KV lives in L1 (device) and/or L2 (host).

It decides as SGLang's radix cache does, each difference between releases a switch (the presets:
hicache_ref.spec.presets), and never moves bytes.
A decision that needs a copy comes back as a `TierCopy` for the controller to perform.
This module holds the tree: match, insert, split, lock and page hashes.
The tier moves and eviction order are hicache_ref.core.tiers.TierMoves (`tree.tiers`).
Keys, invariants and the differences from upstream: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from hicache_ref.core.allocator import has_duplicates, pages_to_slots, slots_to_pages
from hicache_ref.core.hashing import hash64
from hicache_ref.core.node import (
    NO_PAGES,
    EvictHostResult,
    EvictResult,
    InsertResult,
    MatchResult,
    Node,
    PageMatch,
    TierCopy,
    iter_subtree,
    lock_path,
    node_hashes,
    unlock_path,
)
from hicache_ref.core.page_keys import make_page_keys
from hicache_ref.core.policy import make_policy
from hicache_ref.core.tiers import TierMoves

# The seed's SGLang write_backup (a node once its parent is backed up); every unbacked ancestor with
# it (SGLang 0.5.23, unified_tree_core.py _build_backup_kv_action).
BACKUP_SCOPE_PATH = {"node": False, "path": True}  # whether a due backup takes its unbacked ancestors too
BACKUP_SCOPES = tuple(BACKUP_SCOPE_PATH)

__all__ = ["EvictHostResult", "EvictResult", "InsertResult", "MatchResult", "Node", "PageMatch", "RadixTree",
           "TierCopy"]


def _common_pages(a: bytes, off: int, b: bytes, page_bytes: int) -> int:
    """Whole pages equal between a[off:] and b (called only where a mismatch is known)."""
    n = min(len(a) - off, len(b))
    x = np.frombuffer(a, dtype=np.uint8, count=n, offset=off)
    y = np.frombuffer(b, dtype=np.uint8, count=n)
    diff = np.flatnonzero(x != y)
    return (int(diff[0]) if len(diff) else n) // page_bytes


def _check_request_id(request_id) -> None:
    try:
        hash(request_id)  # the policy keys its per-request memory by it, after the walk splits
    except TypeError:
        raise ValueError(f"request_id: must be hashable, got {type(request_id).__name__}") from None


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")


def _allocator(x):
    return getattr(x, "allocator", x)


class RadixTree:
    def __init__(self, spec, *, device=None, host=None, ghost=None,
                 on_write_back: Callable[[list[TierCopy]], None] | None = None,
                 clock: Callable[[], int] | None = None, page_keys: str = "tokens"):
        """The tree `spec` (a hicache_ref.spec.CacheSpec: page size, write policy, hit counting,
        backup scope, eviction size) describes, over the allocators `device` and `host`."""
        page_size, sem = spec.geometry.page_size, spec.semantics
        backup_scope = sem.backup_scope
        if backup_scope not in BACKUP_SCOPES:
            raise ValueError(f"backup_scope: {backup_scope!r} is not one of {', '.join(BACKUP_SCOPES)}")
        self.page_size, self.backup_scope = page_size, backup_scope
        self._backs_up_path = BACKUP_SCOPE_PATH[backup_scope]
        self.keys = make_page_keys(page_keys, page_size)
        self.page_bytes = self.keys.page_bytes  # key bytes per page
        self.policy = make_policy(spec.tiers.write_policy, hit_count=sem.hit_count)
        self.ghost = ghost
        self.device = _allocator(device) if device is not None else None
        self.host = _allocator(host) if host is not None else None
        for name, a in (("device", self.device), ("host", self.host)):
            if a is not None and a.page_size != page_size:
                raise ValueError(f"{name}: allocator page_size {a.page_size} != tree page_size {page_size}")
        self._ops = itertools.count(1)
        self.clock = clock or (lambda: next(self._ops))
        self._ids = itertools.count(1)
        self.root = Node(0, None, b"", NO_PAGES, NO_PAGES)
        self.root.hashes = []
        self.tiers = TierMoves(self.root, page_size, self.policy, ghost, self.device, self.host, on_write_back,
                               sem.evict_size, self.keys, backup_alloc=sem.backup_alloc,
                               host_reclaim=sem.host_reclaim)

    # -- match -------------------------------------------------------------------
    def _tokens(self, tokens) -> tuple[bytes, int]:
        """The keys of the whole pages of `tokens`, and their length in bytes."""
        data = self.keys.encode(tokens)
        return data, len(data)

    def _walk(self, data: bytes, n: int, now: int):
        """Follow data[:n] down the tree, splitting where the match ends inside a node."""
        P, node, off, path = self.page_bytes, self.root, 0, []
        self.root.last_access = now
        while off < n:
            child = node.children.get(data[off : off + P])
            if child is None:
                break
            k = len(child.key)
            if off + k <= n and data.startswith(child.key, off):
                m = k
            else:
                m = min(_common_pages(data, off, child.key, P) * P, n - off)
            child.last_access = now
            if m < k:
                child = self._split(child, m // P)
            path.append(child)
            node, off = child, off + m
        return path, off

    def match_prefix(self, tokens) -> MatchResult:
        """Longest cached page-aligned prefix: its device part, then its host-only tail."""
        m, ps = self.match_pages(tokens), self.page_size
        return MatchResult(len(m.device_pages) * ps, len(m.host_pages) * ps, m.last_device_node, m.last_host_node,
                           pages_to_slots(m.device_pages, ps), pages_to_slots(m.host_pages, ps))

    def match_pages(self, tokens) -> PageMatch:
        """match_prefix in page numbers, for a caller that works in pages (HiCache)."""
        data, n = self._tokens(tokens)
        path, _ = self._walk(data, n, self.clock())
        dev = [x.dev for x in path if x.dev is not None]
        host = [x.host for x in path[len(dev) :]]
        last_dev = path[len(dev) - 1] if dev else self.root
        cat = lambda parts: np.concatenate(parts) if parts else NO_PAGES  # noqa: E731
        self.tiers.note(last_dev)  # touched: the only path nodes that can be leaves
        if path:
            self.tiers.note(path[-1])
        return PageMatch(cat(dev), cat(host), last_dev, path[-1] if path else self.root)

    def _split(self, node: Node, k: int) -> Node:
        """Cut `node` after k pages; the new upper node takes its place and is returned."""
        cut = k * self.page_bytes
        upper = Node(next(self._ids), node.parent, node.key[:cut],
                     None if node.dev is None else node.dev[:k], None if node.host is None else node.host[:k])
        upper.lock_ref, upper.hit_count, upper.last_access = node.lock_ref, node.hit_count, node.last_access
        self.tiers.num_nodes += 1
        if node.hashes is not None:
            upper.hashes, node.hashes = node.hashes[:k], node.hashes[k:]
        if node.dev is not None:
            node.dev = node.dev[k:]
        if node.host is not None:
            node.host = node.host[k:]
        node.parent.children[node.key[: self.page_bytes]] = upper
        node.key = node.key[cut:]
        node.parent = upper
        upper.children[node.key[: self.page_bytes]] = node
        self.tiers.note(node)  # touched by the walk that split it, and off that walk's path
        return upper

    # -- insert ------------------------------------------------------------------
    def insert(self, tokens, device_indices, request_id=None, finished: bool = True,
               chunked: bool = False) -> InsertResult:
        """Cache the page-aligned prefix of `tokens` whose KV sits at `device_indices`.

        device_indices: token slots for (at least) the page-aligned prefix of tokens. The tree
        adopts those past `prefix_len`; the caller still owns (and frees) the ones before.
        Bad input (too few slots, not whole pages, a page given twice, pages not allocated,
        an unhashable request_id) raises ValueError before the tree changes. `finished`: the
        request's last insert (cache_finished_req); `chunked`: one chunk of a chunked prefill,
        which the seed's SGLang hit counting skips (policy: per_insert).
        """
        _check_request_id(request_id)
        _check_flag("chunked", chunked)
        data, n = self._tokens(tokens)
        idx = np.asarray(device_indices if device_indices is not None else NO_PAGES)
        full = n // self.page_bytes * self.page_size
        if len(idx) < full:
            raise ValueError(f"device_indices: {len(idx)} slots for {full} page-aligned tokens")
        pages = slots_to_pages(idx[:full], self.page_size, "device_indices")
        self._check_pages_in(pages, "device_indices")
        return self._insert(data, n, pages, request_id, finished, chunked)

    def insert_pages(self, tokens, device_pages, request_id=None, finished: bool = True,
                     chunked: bool = False, owned: bool = False) -> InsertResult:
        """insert with the KV's device pages (one per whole page of tokens, at least) instead
        of its slots, for a caller that works in pages (HiCache); the same checks, per page.
        `owned`: the pages are this tree's matched pages and pages just taken from its device
        allocator (HiCache's request path), so they are distinct and allocated by
        construction and those two checks are skipped."""
        _check_request_id(request_id)
        _check_flag("chunked", chunked)
        data, n = self._tokens(tokens)
        pages = np.asarray(device_pages if device_pages is not None else NO_PAGES)
        if pages.ndim != 1 or (pages.size and not np.issubdtype(pages.dtype, np.integer)):
            raise ValueError(f"device_pages: expected a 1-D integer array, got shape {pages.shape} dtype {pages.dtype}")
        if len(pages) < n // self.page_bytes:
            raise ValueError(f"device_pages: {len(pages)} pages for {n // self.page_bytes} whole pages of tokens")
        pages = pages[: n // self.page_bytes].astype(np.int64, copy=False)
        if not owned:
            self._check_pages_in(pages, "device_pages")
        return self._insert(data, n, pages, request_id, finished, chunked)

    def _check_pages_in(self, pages: np.ndarray, name: str) -> None:
        if has_duplicates(pages):
            raise ValueError(f"{name}: the same page given twice (two nodes would own it)")
        if self.device is not None and not self.device.pages_allocated(pages):
            raise ValueError(f"{name}: pages that are not allocated in the device pool")

    def _insert(self, data: bytes, n: int, pages_in: np.ndarray, request_id, finished: bool,
                chunked: bool = False) -> InsertResult:
        """insert, its input checked: data[:n] the page-aligned token bytes, pages_in their pages."""
        P = self.page_bytes
        now = self.clock()
        path, off = self._walk(data, n, now)
        counting = self.policy.counts_insert(chunked)
        # A request counts each node once (per_request, per_request_insert); per_insert skips nothing.
        skip = self.policy.counted_pages(request_id) if counting else n // P
        # per_request_insert (0.5.23) also counts a host-only node the insert re-adopts, and only
        # nodes counted here may queue a backup (`counted`: their ids).
        count_adopted, counted = self.policy.backs_up_counted_only, set()
        prefix_pages = adopted = page = 0
        for node in path:
            end = page + len(node.key) // P
            if node.dev is not None:
                prefix_pages = end
                if end > skip:
                    node.hit_count += 1
                    counted.add(node.id)
            else:  # host-only: take the request's recomputed KV instead of loading it
                node.dev = pages_in[page:end].copy()
                self.tiers.device_pages += end - page
                adopted += end - page
                self.tiers.note_duplicate(node)
                if count_adopted and end > skip:
                    node.hit_count += 1
                    counted.add(node.id)
            page = end
        new = None
        if off < n:
            parent = path[-1] if path else self.root
            new = Node(next(self._ids), parent, data[off:n], pages_in[off // P :].copy())
            new.hit_count, new.last_access = int(counting), now
            if counting:
                counted.add(new.id)
            parent.children[data[off : off + P]] = new
            self.tiers.device_pages += len(new.dev)
            self.tiers.num_nodes += 1
            path.append(new)
        last = path[-1] if path else self.root
        self.tiers.note(last)  # the whole path is in L1 now: only its end can be a leaf
        self.policy.record(request_id, n // P, finished)
        # SGLang backs up only from its hit increment: an insert that counts no hit queues none.
        backups = self._backups_after_insert(path, counted if count_adopted else None) if counting else []
        new_nodes = [] if new is None else [new] if new.parent is parent else [new.parent, new]  # ghost may split it
        ps = self.page_size
        return InsertResult(prefix_pages * ps, adopted * ps, (n - off) // P, new_nodes, backups, last)

    def _backups_after_insert(self, path: list[Node], counted: set | None = None) -> list[TierCopy]:
        """One TierCopy for the nodes of `path` (root-first) the policy and ghost list back up:
        upstream submits a write per node and its controller merges those of one batch.
        `counted`: when given, only these nodes (counted by this insert) can be due."""
        if self.host is None or not path:
            return []
        picked, deepest = set(), -1

        def due(node: Node) -> bool:
            return self.policy.should_back_up(node.hit_count) and (counted is None or node.id in counted)

        if self._backs_up_path:  # the deepest node due, with its ancestors (0.5.23's chain)
            for i, node in enumerate(path):
                if node.host is None and due(node):
                    deepest = i
            picked = {x.id for x in path[: deepest + 1] if x.host is None}
        else:  # upstream's write_backup: a node due whose parent is backed up (or the root)
            parent_backed = True
            for i, node in enumerate(path):
                if node.host is None:
                    if not (parent_backed and due(node)):
                        parent_backed = False
                        continue
                    picked.add(node.id)
                    deepest = i
                parent_backed = True
        if self.ghost is not None and deepest < len(path) - 1:
            proven = self._ghost_proven(path, deepest + 1)  # may split path[proven]
            picked.update(x.id for x in path[: proven + 1] if x.host is None)
        todo = [x for x in path if x.id in picked]
        t = self.tiers.back_up(todo) if todo else None
        return [t] if t else []

    def _ghost_proven(self, path: list[Node], start: int) -> int:
        """Index in `path` of the node ending the longest prefix proven reused by the ghost list,
        looking only at path[start:] (what the write policy did not already choose), or -1.

        Scans pages backward; the first remembered page ends the proven prefix. The node
        holding it is split there (path[i] becomes the upper part) so that exactly the
        proven pages get backed up. The ghost list only adds to the policy's backup: a
        remembered page inside it is not looked at, so the policy's nodes stay whole.
        """
        for i in range(len(path) - 1, start - 1, -1):
            hashes = node_hashes(path[i], self.keys)
            for j in range(len(hashes) - 1, -1, -1):
                if self.ghost.hit(hash64(hashes[j])):
                    if j + 1 < len(hashes):
                        path[i] = self._split(path[i], j + 1)
                    return i
        return -1

    # -- pages for a prefill, pages from L3 -------------------------------------------------
    def take_device_pages(self, need: int, extend_tokens: int) -> np.ndarray:
        """Up to `need` L1 pages for a prefill extending by `extend_tokens`, evicting L1 as the
        tree's eviction size says (TierMoves.take_pages with the extend's demand); fewer when
        locked nodes hold the rest."""
        t = self.tiers
        return t.take_pages(self.device, need, t.evict, partial=True, evict_tokens=t.extend_demand(extend_tokens))

    def insert_host_pages(self, data: bytes, match: PageMatch, host_pages: np.ndarray,
                          hashes: list[bytes]) -> PageMatch:
        """Add `host_pages` (allocated in the host allocator, holding the KV of the pages right after
        `match` of the request whose page keys are `data`) as one host-only child of the match's last
        node, with their chained `hashes`; the extended match. The match ends at a node boundary
        (the walk splits a node where a match ends inside it), so the pages continue its path."""
        P = self.page_bytes
        have = len(match.device_pages) + len(match.host_pages)
        start, end = have * P, (have + len(host_pages)) * P
        parent = match.last_host_node
        first = data[start: start + P]
        if first in parent.children or end > len(data):
            raise ValueError("host_pages: the match does not end where the fetched pages begin")
        node = Node(next(self._ids), parent, data[start:end], None, np.asarray(host_pages, dtype=np.int64).copy())
        node.last_access = self.clock()
        node.hashes = list(hashes[: len(host_pages)])
        parent.children[first] = node
        self.tiers.host_pages += len(host_pages)
        self.tiers.num_nodes += 1
        self.tiers.note(node)
        self.tiers.note(parent)
        return PageMatch(match.device_pages, np.concatenate([match.host_pages, node.host]), match.last_device_node,
                         node)

    # -- lock and hashes ----------------------------------------------------------------
    def lock(self, node: Node) -> None:
        """Protect `node` and its ancestors from eviction on both tiers until unlock(node)."""
        lock_path(self.root, node)

    def unlock(self, node: Node) -> None:
        """Undo one lock(node); ValueError if it is not locked."""
        unlock_path(self.root, node)

    def node_hashes(self, node: Node) -> list[bytes]:
        """Chained SHA-256 of each page of `node` (computed on first use, with its ancestors')."""
        return node_hashes(node, self.keys)

    def iter_nodes(self):
        """All nodes except the root, parents before children, in creation order per level."""
        return iter_subtree(self.root)
