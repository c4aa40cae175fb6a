"""The radix tree's nodes and the results its operations hand out.

Shared by hicache_ref.core.radix (the tree: match, insert, split) and hicache_ref.core.tiers (the
moves between L1 and L2), so that neither imports the other for its types. Also the
node-level helpers both need: the path to the root (locks) and the lazy page hashes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.core.hashing import chain_hashes

NO_PAGES = np.zeros(0, dtype=np.int64)


class Node:
    __slots__ = ("id", "parent", "children", "key", "dev", "host", "lock_ref", "hit_count", "last_access", "hashes")

    def __init__(self, nid: int, parent: Node | None, key: bytes, dev, host=None):
        self.id = nid  # creation number: the deterministic LRU tie-break
        self.parent = parent
        self.children: dict[bytes, Node] = {}  # first page's key -> child
        self.key = key  # whole pages, spelled as the tree's page_keys say (hicache_ref.core.page_keys)
        self.dev: np.ndarray | None = dev  # device page numbers, None when not in L1
        self.host: np.ndarray | None = host  # host page numbers, None when not in L2
        self.lock_ref = 0
        self.hit_count = 0
        self.last_access = 0
        self.hashes: list[bytes] | None = None  # per-page chained SHA-256, filled lazily

    @property
    def backed_up(self) -> bool:
        """Whether the node has a host (L2) copy."""
        return self.host is not None

    def __repr__(self) -> str:
        pages = len(self.dev if self.dev is not None else self.host if self.host is not None else ())
        return f"Node(id={self.id}, pages={pages}, dev={self.dev is not None}, host={self.host is not None}, " \
               f"lock={self.lock_ref})"


def lock_path(root: Node, node: Node) -> None:
    """Protect `node` and its ancestors from eviction on both tiers until unlock_path."""
    for x in _chain(root, node):
        x.lock_ref += 1


def unlock_path(root: Node, node: Node) -> None:
    """Undo one lock_path(root, node); ValueError (nothing changed) if it was not locked."""
    path = _chain(root, node)
    if any(x.lock_ref <= 0 for x in path):
        raise ValueError(f"node: unlock of an unlocked node {node!r}")
    for x in path:
        x.lock_ref -= 1


def _chain(root: Node, node: Node) -> list[Node]:
    path = []
    while node is not root:
        if node is None:
            raise ValueError("node: not in the tree (evicted from both tiers)")
        path.append(node)
        node = node.parent
    return path


def node_hashes(node: Node, keys) -> list[bytes]:
    """Chained SHA-256 of each page of `node` (computed on first use, with its ancestors'),
    over its token ids: `keys` is the tree's page spelling (hicache_ref.core.page_keys)."""
    todo = []
    while node.hashes is None:
        todo.append(node)
        node = node.parent
    for x in reversed(todo):
        prior = x.parent.hashes[-1] if x.parent.hashes else None
        x.hashes = chain_hashes(keys.token_bytes(x.key), keys.hash_page_bytes, prior)
    return todo[0].hashes if todo else node.hashes


def iter_subtree(root: Node):
    """All nodes below `root`, parents before children, in creation order per level."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node is not root:
            yield node
        stack.extend(reversed(list(node.children.values())))


class MatchResult(NamedTuple):
    device_len: int
    host_len: int
    last_device_node: Node
    last_host_node: Node
    device_indices: np.ndarray
    host_indices: np.ndarray


class PageMatch(NamedTuple):
    """match_pages' answer: MatchResult in page numbers (page p = slots [p*ps, (p+1)*ps))."""

    device_pages: np.ndarray
    host_pages: np.ndarray
    last_device_node: Node
    last_host_node: Node


@dataclass(eq=False)
class TierCopy:
    """A copy between the tiers that the tree asks its caller to perform (the tree moves no
    bytes): kind 'backup' / 'write_back' (D2H) or 'load' (H2D).

    Kept in pages (page p = slots [p*page_size, (p+1)*page_size)); the token slots are
    expanded on first use, so a caller that moves pages (HiCache) never pays for them.
    """

    kind: str
    nodes: list[Node]
    device_pages: np.ndarray  # page numbers, int64
    host_pages: np.ndarray
    page_size: int
    lock_node: Node | None = None  # held until complete(); None for write-backs
    done: bool = field(default=False)

    @property
    def num_tokens(self) -> int:
        return len(self.device_pages) * self.page_size

    @cached_property
    def device_indices(self) -> np.ndarray:
        """Token slots (int64) of device_pages."""
        return pages_to_slots(self.device_pages, self.page_size)

    @cached_property
    def host_indices(self) -> np.ndarray:
        return pages_to_slots(self.host_pages, self.page_size)


class InsertResult(NamedTuple):
    prefix_len: int  # tokens already in L1: the caller's indices for them were not adopted
    adopted_len: int  # tokens of host-only nodes that took the caller's device indices
    new_pages: int
    new_nodes: list[Node]
    backups: list[TierCopy]
    last_node: Node


class EvictResult(NamedTuple):
    evicted_tokens: int
    freed_device_indices: np.ndarray
    write_backs: list[TierCopy]
    dropped_nodes: int


class EvictHostResult(NamedTuple):
    evicted_tokens: int
    freed_host_indices: np.ndarray
