"""Write policies (when L1 pages are backed up to L2), hit counting, and eviction order.

- write_back: never back up on insert; a page is written to L2 only when it is evicted
  from L1 (the tree hands the copy to the caller before freeing the device slots).
- write_through: back up every node as soon as it is inserted (threshold 1).
- write_through_selective: back up a node once its hit count reaches `threshold`
  (2 by default, as upstream).

Hit counting, as upstream, happens on insert: every node on the inserted path that holds
device KV gets one hit, and so does a newly created node. Upstream counts per *insert*;
the scheduler inserts a request when a chunk or turn is cached unfinished and again when
it finishes, so one request hits its own nodes twice and selective silently becomes
write-through. Here a hit is counted per *request*: for each request id the policy
remembers how many leading pages that request has already counted, and a later insert by
the same id counts only the nodes that end beyond them. The memory is dropped when the
request's finished insert arrives (or on `forget`). An insert without a request id counts
as a fresh request, which is upstream's behaviour.

Eviction order (`LeafHeap`) is LRU over leaves, as upstream's default.
"""

from __future__ import annotations

import heapq

POLICIES = ("write_back", "write_through", "write_through_selective")


class WritePolicy:
    """Decides backups; keeps the per-request memory that makes hits count once."""

    def __init__(self, name: str, threshold: int = 2):
        if name not in POLICIES:
            raise ValueError(f"policy: {name!r} is not one of {', '.join(POLICIES)}")
        if not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"threshold: must be a positive integer, got {threshold!r}")
        self.name = name
        # Hit count at which insert backs a node up; None: only eviction writes (write_back).
        self.threshold: int | None = {"write_back": None, "write_through": 1}.get(name, threshold)
        self._counted: dict = {}  # request id -> leading pages that request has already counted

    @property
    def writes_back_on_evict(self) -> bool:
        return self.name == "write_back"

    def should_back_up(self, hit_count: int) -> bool:
        return self.threshold is not None and hit_count >= self.threshold

    # -- once-per-request hit counting ---------------------------------------------
    def counted_pages(self, request_id) -> int:
        """Leading pages of this request's path that already counted a hit (0 if none/None)."""
        if request_id is None:
            return 0
        return self._counted.get(request_id, 0)

    def record(self, request_id, pages: int, finished: bool) -> None:
        """After an insert of `pages` pages: remember them until the request finishes."""
        if request_id is None:
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
        return f"WritePolicy({self.name!r}, threshold={self.threshold})"


def make_policy(name: str | WritePolicy = "write_through_selective", threshold: int = 2) -> WritePolicy:
    """A policy by name; an existing policy object is returned as is."""
    if isinstance(name, WritePolicy):
        return name
    return WritePolicy(name, threshold)


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
