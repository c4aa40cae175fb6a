"""`hicache replay`'s request-path options: upstream semantics vs the reference's.

One block of options (hit counting, PD-disaggregated inserts) that conformance.cli.replay
adds and turns into CacheSpec fields. An option left out takes the spec's default; the
differences they select are listed in hicache_ref/README.md.
"""

from __future__ import annotations

from hicache_ref.policy import HIT_COUNTS


def add_arguments(p) -> None:
    """The request-path options (defaults None: the spec's default applies)."""
    p.add_argument("--hit-count", choices=HIT_COUNTS,
                   help="per_insert: every insert counts a hit, as upstream (chunked inserts and write_back "
                        "excepted); per_request: a request counts each node once, the reference's fix (default)")
    p.add_argument("--pd-disagg", action="store_true",
                   help="insert every request unfinished, then finished, as a PD-disaggregated prefill "
                        "server does (cache_unfinished_req, cache_finished_req)")


def spec_fields(a) -> dict:
    """CacheSpec fields from the request-path options (only those given)."""
    fields = {}
    if a.hit_count is not None:
        fields["hit_count"] = a.hit_count
    if a.pd_disagg:
        fields["pd_disagg"] = True
    return fields
