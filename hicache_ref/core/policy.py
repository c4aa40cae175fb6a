"""Write policies (when L1 pages are backed up to L2), hit counting, and eviction order.

write_back backs up on eviction only, write_through on insert, write_through_selective once a
node's hit count reaches the threshold (2, as upstream). Hits count per insert (the seed's SGLang),
per request (the default: what "selective" means when one request is inserted twice), or per
request past what that request already inserted (SGLang 0.5.23's inserted_len). Eviction is LRU
over leaves (`LeafHeap`). Details: hicache_ref/README.md, "Hit counting".
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

POLICIES = ("write_back", "write_through", "write_through_selective")


class HitCount(NamedTuple):
    """One way of counting hits: whether a chunked insert counts, whether write_back counts at
    all, whether a request counts each node once, and whether only counted nodes back up."""

    counts_chunked: bool
    counts_write_back: bool
    once_per_request: bool
    counted_only_back_up: bool


# The seed's SGLang, the reference's, SGLang 0.5.23's (see the module docstring).
HIT_COUNT_RULES = {
    "per_insert": HitCount(counts_chunked=False, counts_write_back=False, once_per_request=False,
                           counted_only_back_up=False),
    "per_request": HitCount(counts_chunked=True, counts_write_back=True, once_per_request=True,
                            counted_only_back_up=False),
    "per_request_insert": HitCount(counts_chunked=True, counts_write_back=False, once_per_request=True,
                                   counted_only_back_up=True),
}
HIT_COUNTS = tuple(HIT_COUNT_RULES)


class WritePolicy:
    """Decides backups; keeps the per-request memory that makes hits count once."""

    def __init__(self, name: str, threshold: int = 2, hit_count: str = "per_request"):
        if name not in POLICIES:
            raise ValueError(f"policy: {name!r} is not one of {', '.join(POLICIES)}")
        if not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"threshold: must be a positive integer, got {threshold!r}")
        if hit_count not in HIT_COUNTS:
            raise ValueError(f"hit_count: {hit_count!r} is not one of {', '.join(HIT_COUNTS)}")
        self.name, self.hit_count = name, hit_count
        self._counting = HIT_COUNT_RULES[hit_count]
        # Hit count at which insert backs a node up; None: only eviction writes (write_back).
        self.threshold: int | None = {"write_back": None, "write_through": 1}.get(name, threshold)
        self._counted: dict = {}  # request id -> leading pages that request has already counted

    @property
    def writes_back_on_evict(self) -> bool:
        return self.name == "write_back"

    def should_back_up(self, hit_count: int) -> bool:
        return self.threshold is not None and hit_count >= self.threshold

    def counts_insert(self, chunked: bool) -> bool:
        """Whether an insert accumulates hits (and so may queue backups) at all: per_insert
        (the seed's SGLang) skips chunked inserts and write_back; per_request_insert (0.5.23,
        unified_tree_core.py _inc_hit_count_and_check) skips write_back only, a chunk counting
        past what the request already inserted; per_request counts every insert."""
        c = self._counting
        return (c.counts_chunked or not chunked) and (c.counts_write_back or not self.writes_back_on_evict)

    @property
    def backs_up_counted_only(self) -> bool:
        """Whether only the nodes this insert counted can queue a backup (0.5.23: a backup is
        fired from the hit increment, _finish_insert_walk_node / _should_backup_after_insert)."""
        return self._counting.counted_only_back_up

    # -- once-per-request hit counting ---------------------------------------------
    def counted_pages(self, request_id) -> int:
        """Leading pages of this request's path that already counted a hit (0 if none/None;
        always 0 per_insert, where every insert counts)."""
        if request_id is None or not self._counting.once_per_request:
            return 0
        return self._counted.get(request_id, 0)

    def record(self, request_id, pages: int, finished: bool) -> None:
        """After an insert of `pages` pages: remember them until the request finishes (per_request)."""
        if request_id is None or not self._counting.once_per_request:
            return
        if finished:
            self._counted.pop(request_id, None)
        else:
            self._counted[request_id] = max(pages, self._counted.get(request_id, 0))

    def forget(self, request_id) -> None:
        """Drop a request that will never send its finished insert (aborted)."""
        self._counted.pop(request_id, None)

    @property
    def requests_in_flight(self) -> int:
        return len(self._counted)

    def __repr__(self) -> str:
        return f"WritePolicy({self.name!r}, threshold={self.threshold}, hit_count={self.hit_count!r})"


def make_policy(name: str | WritePolicy = "write_through_selective", threshold: int = 2,
                hit_count: str = "per_request") -> WritePolicy:
    """A policy by name; an existing policy object is returned as is."""
    if isinstance(name, WritePolicy):
        return name
    return WritePolicy(name, threshold, hit_count)


class LeafHeap:
    """Eviction order over one tier's leaves: least recently used first, ties to the older node.

    Lazy, so that an eviction costs O(log n) per node rather than a walk over the tree:
    the tree pushes a node whenever it may have become a leaf or was touched, and an entry
    whose node has since been touched again, stopped being a leaf or left the tree is
    dropped when it reaches the top. Stale entries are compacted away once they outnumber
    the live ones.
    """

    def __init__(self, is_leaf):
        self.is_leaf = is_leaf  # node -> bool; False for nodes no longer in the tree
        self._heap: list = []

    def push(self, node) -> None:
        if self.is_leaf(node):
            heapq.heappush(self._heap, (node.last_access, node.id, node))

    def pop(self):
        """The least recently used current leaf (removed from the heap), or None."""
        heap = self._heap
        while heap:
            t, _, node = heapq.heappop(heap)
            if node.last_access == t and self.is_leaf(node):
                return node
        return None

    def rebuild(self, nodes) -> None:
        self._heap = [(x.last_access, x.id, x) for x in nodes if self.is_leaf(x)]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
