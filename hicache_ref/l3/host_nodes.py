"""Put pages fetched from L3 into the radix tree as host-resident (L2-only) nodes.

The match that found the miss ends exactly at a node boundary (the tree splits a node
where a match ends inside it), so the fetched pages continue the matched path as one new
child of its last node, holding host pages and no device pages. From there the normal
path takes them to L1: the request's load_back copies them H2D like any L2 hit, and a
later request finds them in L2. The tree's occupancy counters and eviction heaps are
kept as its own insert keeps them (hicache_ref.core.tiers.TierMoves.note).
"""

from __future__ import annotations

import numpy as np

from hicache_ref.core.hashing import chain_hashes
from hicache_ref.core.node import Node, PageMatch, node_hashes


def missing_hashes(tree, data: bytes, match: PageMatch, full_pages: int) -> list[bytes]:
    """Chained page hashes of pages [matched, full_pages) of the request whose page keys (the
    tree's spelling, tree.keys) are `data`, continuing the chain of the match's last node."""
    keys, P = tree.keys, tree.page_bytes
    have = len(match.device_pages) + len(match.host_pages)
    # the root's "hashes" are the chain's seed: [] or upstream's namespace seed (l3.build.seed_chain)
    prior = node_hashes(match.last_host_node, keys) if match.last_host_node is not tree.root else tree.root.hashes
    return chain_hashes(keys.token_bytes(data[have * P: full_pages * P]), keys.hash_page_bytes,
                        prior[-1] if prior else None)


def insert_host_pages(tree, data: bytes, match: PageMatch, host_pages: np.ndarray,
                      hashes: list[bytes]) -> PageMatch:
    """Add `host_pages` (already allocated in the tree's host allocator, holding the KV of the
    pages right after the match) as a child of the match's last node; the extended match."""
    P = tree.page_bytes
    have = len(match.device_pages) + len(match.host_pages)
    start, end = have * P, (have + len(host_pages)) * P
    parent = match.last_host_node
    first = data[start: start + P]
    if first in parent.children or end > len(data):
        raise ValueError("host_pages: the match does not end where the fetched pages begin")
    node = Node(next(tree._ids), parent, data[start:end], None, np.asarray(host_pages, dtype=np.int64).copy())
    node.last_access = tree.clock()
    node.hashes = list(hashes[: len(host_pages)])
    parent.children[first] = node
    tree.tiers.host_pages += len(host_pages)
    tree.tiers.num_nodes += 1
    tree.tiers.note(node)
    tree.tiers.note(parent)
    return PageMatch(match.device_pages, np.concatenate([match.host_pages, node.host]), match.last_device_node, node)
