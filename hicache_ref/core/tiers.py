"""Moves of prefix KV between the radix tree's tiers, L1 (device) and L2 (host).

Every copy the tree asks of its caller is built here as a `TierCopy`: backups, write-backs, load-backs.
Here too are the evictions that free slots: `evict` (L1) and `evict_host` (L2).
`TierMoves` keeps the tiers' counters and eviction order; the tree hands it what it works on.
The behaviour is described in hicache_ref/README.md ("Design notes", the radix tree).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.core.hashing import hash64
from hicache_ref.core.node import (
    NO_PAGES,
    EvictHostResult,
    EvictResult,
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
from hicache_ref.core.policy import LeafHeap, WritePolicy

# How much an allocation that finds its tier short asks eviction for:
# - whole (upstream): the allocation's whole size, as HiRadixCache.load_back
#   (evict(len(host_indices))), write_backup (evict_host(len(node.value))) and the
#   scheduler's token allocation (evict(num_tokens) once available < num_tokens) do;
# - shortfall (the reference's): only what is missing, so no more is evicted than needed;
# - demand_shortfall (SGLang 0.5.23): what the allocation's demand (for an extend: its tokens
#   plus one page, allocation.py alloc_paged_token_slots_extend; with pages of 1 token its tokens
#   alone, alloc_token_slots) exceeds the free tokens by
#   (allocator/base.py evict_to_free_tokens); elsewhere (load_back, backups) the shortfall.


class Shortfall:
    """Evict only what the allocation is missing."""

    def extend_demand(self, tokens: int, page_size: int) -> int:
        return tokens + page_size

    def take(self, allocator, need: int, evict: Callable, partial: bool, evict_tokens: int | None, ps: int):
        pages = allocator.alloc_pages(need)
        if pages is None:
            evict((need - allocator.available_pages) * ps)
            pages = allocator.alloc_pages(min(need, allocator.available_pages) if partial else need)
        return pages


class Whole(Shortfall):
    """Evict the allocation's whole size (`evict_tokens`, default the need) once fewer tokens are free."""

    def take(self, allocator, need, evict, partial, evict_tokens, ps):
        want = need * ps if evict_tokens is None else evict_tokens
        if need and allocator.available_pages * ps < want:
            evict(want)
        return allocator.alloc_pages(min(need, allocator.available_pages) if partial else need)


class DemandShortfall(Shortfall):
    """Evict what the demand (`evict_tokens`) exceeds the free tokens by; without a demand, the shortfall."""

    def extend_demand(self, tokens: int, page_size: int) -> int:
        return tokens + (0 if page_size == 1 else page_size)  # pages of 1 token: the extend alone

    def take(self, allocator, need, evict, partial, evict_tokens, ps):
        if evict_tokens is None:
            return super().take(allocator, need, evict, partial, evict_tokens, ps)
        short = evict_tokens - allocator.available_pages * ps
        if need and short > 0:
            evict(short)
        return allocator.alloc_pages(min(need, allocator.available_pages) if partial else need)


EVICT_RULES = {"whole": Whole(), "shortfall": Shortfall(), "demand_shortfall": DemandShortfall()}
EVICT_SIZES = tuple(EVICT_RULES)
# How a backup of several nodes takes host slots: all at once or none (the seed's SGLang), or node
# by node top-down, stopping at the first that finds no room (SGLang 0.5.23,
# unified_radix_cache.py _execute_and_commit_kv_backup). The value: whether node by node.
BACKUP_ALLOC_PER_NODE = {"whole_chain": False, "per_node": True}
BACKUP_ALLOCS = tuple(BACKUP_ALLOC_PER_NODE)
# What L2 eviction frees first under write_back: host-only leaves (the seed's SGLang), or first the
# host copies of nodes also in L1 (SGLang 0.5.23, unified_tree_core.py drive_host_eviction,
# _reclaim_full_host_duplicates), sparing L1 leaves on a first pass. The value: whether duplicates first.
HOST_RECLAIM_DUPLICATES_FIRST = {"leaves": False, "duplicates_first": True}
HOST_RECLAIMS = tuple(HOST_RECLAIM_DUPLICATES_FIRST)


def _device_leaf(x: Node) -> bool:
    """In L1 with no child in L1 (a loop: this runs on every touch, a generator costs twice as much)."""
    if x.parent is None or x.dev is None:
        return False
    for c in x.children.values():
        if c.dev is not None:
            return False
    return True


class TierMoves:
    """A radix tree's backups, evictions, write-backs and load_backs (see the module docstring)."""

    def __init__(self, root: Node, page_size: int, policy: WritePolicy, ghost=None, device=None, host=None,
                 on_write_back: Callable[[list[TierCopy]], None] | None = None, evict_size: str = "shortfall",
                 keys=None, backup_alloc: str = "whole_chain", host_reclaim: str = "leaves"):
        for name, value, choices in (("evict_size", evict_size, EVICT_SIZES),
                                     ("backup_alloc", backup_alloc, BACKUP_ALLOCS),
                                     ("host_reclaim", host_reclaim, HOST_RECLAIMS)):
            if value not in choices:
                raise ValueError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        self.evict_size, self.backup_alloc, self.host_reclaim = evict_size, backup_alloc, host_reclaim
        self._evict_rule = EVICT_RULES[evict_size]
        self._per_node_backup = BACKUP_ALLOC_PER_NODE[backup_alloc]
        self._duplicates_first = HOST_RECLAIM_DUPLICATES_FIRST[host_reclaim]
        # Nodes that became resident on both tiers (load_back, an insert re-adopting a host-only node),
        # oldest first: what duplicates_first reclaims. Entries go stale lazily.
        self._duplicates: dict[int, Node] = {}
        self.root, self.page_size = root, page_size
        self.keys = keys or make_page_keys("tokens", page_size)  # the tree's page spelling
        self.page_bytes = self.keys.page_bytes  # key bytes per page
        self.policy, self.ghost, self.device, self.host = policy, ghost, device, host
        self.on_write_back = on_write_back
        self.device_pages = 0  # pages the tree holds in L1
        self.host_pages = 0
        self.num_nodes = 0  # without the root
        self._uncopied: set = frozenset()  # ids of write-back nodes whose copy is still owed (inside evict)
        # A node is in the tree while it has a parent (the root is never a leaf).
        self._dev_leaves = LeafHeap(_device_leaf)
        self._host_leaves = LeafHeap(lambda x: x.parent is not None and x.dev is None and not x.children)

    def note(self, node: Node) -> None:
        """`node` may have become a leaf, or was touched: queue it for both eviction orders."""
        self._dev_leaves.push(node)
        self._host_leaves.push(node)
        if len(self._dev_leaves) + len(self._host_leaves) > 4 * self.num_nodes + 1024:
            for heap in (self._dev_leaves, self._host_leaves):  # compact stale entries
                heap.rebuild(iter_subtree(self.root))

    def lock(self, node: Node) -> None:
        """Protect `node` and its ancestors from eviction (node.lock_path)."""
        lock_path(self.root, node)

    def unlock(self, node: Node) -> None:
        """Undo one lock(node) (node.unlock_path)."""
        unlock_path(self.root, node)

    def extend_demand(self, tokens: int) -> int:
        """Tokens an extend of `tokens` allocates for, as eviction counts them: upstream's paged
        allocation asks for the extend plus one page per request; SGLang 0.5.23's token allocator
        (pages of 1 token, demand_shortfall) for the extend alone (alloc_token_slots)."""
        return self._evict_rule.extend_demand(tokens, self.page_size)

    def take_pages(self, allocator, need: int, evict: Callable, partial: bool = False,
                   evict_tokens: int | None = None) -> np.ndarray | None:
        """`need` pages from `allocator` (a tier's: self.device or self.host), evicting that tier
        (`evict`: self.evict or self.evict_host, LRU) once if it is short: by the shortfall, or
        with evict_size 'whole' by the whole allocation (`evict_tokens`, default need pages,
        as the seed's SGLang: once fewer than that many tokens are free), or with
        'demand_shortfall' by what `evict_tokens` exceeds the free tokens by (0.5.23).

        Still short after that (locked nodes): None, or with `partial` the pages that are free.
        """
        return self._evict_rule.take(allocator, need, evict, partial, evict_tokens, self.page_size)

    # -- backup (insert) ----------------------------------------------------------
    def back_up(self, nodes: list[Node]) -> TierCopy | None:
        """Give `nodes` (root-first, on device, no host copy) host slots; lock them until complete()."""
        if self._per_node_backup:
            return self._back_up_per_node(nodes)
        need = sum(len(x.dev) for x in nodes)
        self.lock(nodes[-1])  # keep them in L1 while host eviction runs and the copy is in flight
        pages = self.take_pages(self.host, need, self.evict_host)
        if pages is None:
            self.unlock(nodes[-1])
            return None
        at = 0
        for x in nodes:
            x.host, at = pages[at : at + len(x.dev)], at + len(x.dev)
        self.host_pages += need
        dev = np.concatenate([x.dev for x in nodes])
        return TierCopy("backup", nodes, dev, pages, self.page_size, nodes[-1])

    def _back_up_per_node(self, nodes: list[Node]) -> TierCopy | None:
        """back_up node by node, each evicting L2 for its own shortfall; the nodes before the first
        that finds no room stay backed up (one copy, locked at the last of them)."""
        self.lock(nodes[-1])
        done, parts = [], []
        for x in nodes:
            pages = self.take_pages(self.host, len(x.dev), self.evict_host)
            if pages is None:
                break
            x.host = pages
            self.host_pages += len(pages)
            done.append(x)
            parts.append(pages)
        if done:
            self.lock(done[-1])
        self.unlock(nodes[-1])
        if not done:
            return None
        dev = np.concatenate([x.dev for x in done])
        return TierCopy("backup", done, dev, np.concatenate(parts), self.page_size, done[-1])

    def note_duplicate(self, node: Node) -> None:
        """`node` is now in L1 and in L2 (duplicates_first reclaims such copies first)."""
        if self._duplicates_first:
            self._duplicates[node.id] = node

    def _reclaim_duplicates(self, n_tokens: int) -> tuple[int, list]:
        """Free L2 copies of nodes also in L1, oldest first: unlocked ones that are not L1 leaves on a
        first pass, then L1 leaves too, until `n_tokens` are freed. (tokens freed, host page arrays)."""
        freed, evicted = [], 0
        for spare_leaves in (True, False):
            for nid, x in list(self._duplicates.items()):
                if evicted >= n_tokens:
                    return evicted, freed
                if x.parent is None or x.dev is None or x.host is None:
                    del self._duplicates[nid]  # stale: no longer on both tiers
                    continue
                if x.lock_ref > 0 or (spare_leaves and _device_leaf(x)):
                    continue
                evicted += len(x.host) * self.page_size
                self.host_pages -= len(x.host)
                freed.append(x.host)
                x.host = None
                del self._duplicates[nid]
        return evicted, freed

    def complete(self, copy: TierCopy) -> None:
        """The caller's copy for a backup or load has landed: release its lock."""
        if copy.done:
            raise ValueError("copy: already completed")
        copy.done = True
        if copy.lock_node is not None:
            self.unlock(copy.lock_node)

    # -- eviction ---------------------------------------------------------------------
    def evict(self, n_tokens: int, on_write_back: Callable[[list[TierCopy]], None] | None = None) -> EvictResult:
        """Free at least `n_tokens` of L1 (fewer if too much is locked), least recently used leaves first.

        A node with a host copy keeps it and stays in the tree; one without is written back
        under write_back (copies go to `on_write_back`, default the tree's, before the
        device slots are freed), else dropped. Only write-backs of nodes still in the tree
        are copied and returned; one whose node a later drop took along is not. Freed
        slots go back to the device allocator.
        """
        if not isinstance(n_tokens, (int, np.integer)) or n_tokens < 0:
            raise ValueError(f"n_tokens: must be a non-negative integer, got {n_tokens!r}")
        freed, write_backs, locked, dropped, evicted = [], [], {}, 0, 0
        write_back = self.policy.writes_back_on_evict and self.host is not None
        # Nodes written back in this call hold host slots whose copy has not run yet: L2
        # eviction for a later write-back must not hand those slots out again.
        self._uncopied = set()
        while evicted < n_tokens and (node := self._dev_leaves.pop()) is not None:
            if node.lock_ref > 0:
                locked[node.id] = node  # back in the heap after this eviction
                continue
            if self.ghost is not None:
                for h in node_hashes(node, self.keys):
                    self.ghost.add(hash64(h))
            n, parent = len(node.dev), node.parent
            evicted += n * self.page_size
            t = self._write_back(node) if node.host is None and write_back else None
            if t is not None:
                write_backs.append(t)  # its device slots are freed once the copy is done
                self._uncopied.add(node.id)
            else:
                freed.append(node.dev)
                self.device_pages -= n
                if node.host is None:
                    dropped += self._drop(node)
                else:
                    node.dev = None
            self.note(node)
            self.note(parent)
        for node in locked.values():
            self._dev_leaves.push(node)
        self._uncopied = set()
        # A write-back whose node was dropped later in this call (its parent's write-back found
        # no host room and took the subtree) lost its host slots, which a later write-back may
        # now hold: it is not copied, its device pages are simply freed.
        for t in write_backs:
            if t.nodes[0].parent is None:
                t.done = True
                freed.append(t.device_pages)
                self.device_pages -= len(t.device_pages)
        write_backs = [t for t in write_backs if not t.done]
        if write_backs:
            (on_write_back or self.on_write_back or (lambda ts: None))(write_backs)
            for t in write_backs:
                t.done = True
                freed.append(t.device_pages)
                self.device_pages -= len(t.device_pages)
        freed_pages = np.concatenate(freed) if freed else NO_PAGES
        if self.device is not None:
            self.device.free_pages(freed_pages)
        return EvictResult(evicted, pages_to_slots(freed_pages, self.page_size), write_backs, dropped)

    def _write_back(self, node: Node) -> TierCopy | None:
        n = len(node.dev)
        pages = self.take_pages(self.host, n, self.evict_host)
        if pages is None:
            return None
        node.host, dev, node.dev = pages, node.dev, None
        self.host_pages += n
        return TierCopy("write_back", [node], dev, pages, self.page_size)

    def _drop(self, node: Node) -> int:
        """Remove `node` and its (host-only) subtree; free their host slots. Returns nodes removed."""
        parent = node.parent
        del parent.children[node.key[: self.page_bytes]]
        removed, stack = 0, [node]
        while stack:
            x = stack.pop()
            stack.extend(x.children.values())
            if x.host is not None:
                self.host_pages -= len(x.host)
                if self.host is not None:
                    self.host.free_pages(x.host)
            x.parent = x.dev = x.host = None  # detached (stale in the eviction heaps); its slots are gone
            removed += 1
        self.num_nodes -= removed
        self.note(parent)
        return removed

    def evict_host(self, n_tokens: int) -> EvictHostResult:
        """Free at least `n_tokens` of L2 from host-only leaves, least recently used first.

        As upstream, only nodes already evicted from L1 lose their host copy (and leave the
        tree); the L2 copy of a node still in L1 is kept.
        """
        if not isinstance(n_tokens, (int, np.integer)) or n_tokens < 0:
            raise ValueError(f"n_tokens: must be a non-negative integer, got {n_tokens!r}")
        freed, locked, evicted = [], {}, 0
        if self._duplicates_first and self.policy.writes_back_on_evict and self._duplicates:
            evicted, freed = self._reclaim_duplicates(n_tokens)
            if freed and self.host is not None:  # (a dropped leaf's slots are freed by _drop)
                self.host.free_pages(np.concatenate(freed))
        while evicted < n_tokens and (node := self._host_leaves.pop()) is not None:
            if node.lock_ref > 0 or node.id in self._uncopied:
                locked[node.id] = node
                continue
            evicted += len(node.host) * self.page_size
            freed.append(node.host)
            self._drop(node)
        for node in locked.values():
            self._host_leaves.push(node)
        freed_pages = np.concatenate(freed) if freed else NO_PAGES
        return EvictHostResult(evicted, pages_to_slots(freed_pages, self.page_size))

    # -- load back -------------------------------------------------------------------
    def _unlocked_tokens(self, node: Node) -> int:
        """Tokens on `node`'s path to the root that a lock would newly protect (lock_ref 0):
        upstream's inc_lock_ref delta, by which it shrinks a load's memory quota."""
        n = 0
        while node is not self.root:
            if node.lock_ref == 0:
                n += len(node.key) // self.page_bytes * self.page_size
            node = node.parent
        return n

    def load_back(self, target: Node | MatchResult | PageMatch, min_tokens: int = 0,
                  quota: int | None = None) -> TierCopy | None:
        """Give the host-only chain ending at `target` device slots again (H2D), or None.

        All or nothing, as upstream's HiRadixCache.load_back: None when nothing is host-only,
        the chain is under `min_tokens` (upstream's load_back_threshold), over `quota` tokens
        less those its ancestors' lock newly protects (upstream's mem_quota + delta; None:
        no quota), or L1 cannot make room even after evicting (take_pages). Otherwise the
        nodes count as in L1 at once (as upstream) and stay locked until `complete(copy)`:
        the caller must not read their KV before the copy.
        """
        if self.device is None:
            raise ValueError("load_back: the tree has no device allocator to take slots from")
        node = getattr(target, "last_host_node", target)  # a MatchResult / PageMatch, or the Node itself
        chain = []
        while node.dev is None:
            if node.parent is None:  # dropped from both tiers since it was matched (detached)
                raise ValueError(f"target: {node!r} is no longer in the tree")
            chain.append(node)
            node = node.parent
        need = sum(len(x.host) for x in chain)
        if not chain or need * self.page_size < min_tokens:
            return None
        if quota is not None and need * self.page_size > quota - self._unlocked_tokens(node):
            return None
        chain.reverse()
        self.lock(chain[-1])  # the eviction below must neither take the chain nor its ancestors
        pages = self.take_pages(self.device, need, self.evict)
        if pages is None:
            self.unlock(chain[-1])
            return None
        at = 0
        for x in chain:
            x.dev, at = pages[at : at + len(x.host)], at + len(x.host)
        self.device_pages += need
        self.note(chain[-1])
        for x in chain:
            self.note_duplicate(x)
        host = np.concatenate([x.host for x in chain])
        return TierCopy("load", chain, pages, host, self.page_size, chain[-1])
