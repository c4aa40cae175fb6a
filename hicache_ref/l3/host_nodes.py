"""The chained hashes of the pages a request misses past its match: what L3 is asked for.

Pages fetched from L3 go into the tree as one host-only child of the match's last node
(RadixTree.insert_host_pages, which keeps the tree's counters and eviction order). From there
the normal path takes them to L1: the request's load_back copies them H2D like any L2 hit,
and a later request finds them in L2.
"""

from __future__ import annotations

from hicache_ref.core.hashing import chain_hashes
from hicache_ref.core.node import PageMatch, node_hashes


def missing_hashes(tree, data: bytes, match: PageMatch, full_pages: int) -> list[bytes]:
    """Chained page hashes of pages [matched, full_pages) of the request whose page keys (the
    tree's spelling, tree.keys) are `data`, continuing the chain of the match's last node."""
    keys, P = tree.keys, tree.page_bytes
    have = len(match.device_pages) + len(match.host_pages)
    # the root's "hashes" are the chain's seed: [] or upstream's namespace seed (l3.attach.seed_chain)
    prior = node_hashes(match.last_host_node, keys) if match.last_host_node is not tree.root else tree.root.hashes
    return chain_hashes(keys.token_bytes(data[have * P: full_pages * P]), keys.hash_page_bytes,
                        prior[-1] if prior else None)
