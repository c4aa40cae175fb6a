"""Differential conformance: the reference (preset sglang_diff.REFERENCE_PRESET) against SGLang's
own HiCache (the sglang engine), request by request, on slices of both packaged traces.

Every case requires equal L1 and L2 hit tokens, host-cached tokens not loaded, backed-up (D2H)
and loaded-back (H2D) tokens per request. Upstream's timing is pinned, since which request a
backup or load lands in depends on thread timing there: every HAL copy completes inside its
op, a request's queued backups are submitted at its end and every ack is taken right after
(check_hicache_events, as the next step's start would); the reference settles its controller
at the same point (HiCache.settle). Device and host eviction counts are not compared: the
reference does not report them per request.

Runs only where SGLang imports at the pinned version (the [sglang] extra, ci/install-sglang.sh);
elsewhere every case is skipped with the reason. Taking on a new SGLang: bump the pin, run this
suite, read the diffs (each failure names the first requests that differ and the totals).
Known mismatches the preset does not model yet are xfail with the diff as the reason (not strict:
a preset that closes one shows XPASS; delete its entry then).
"""

from __future__ import annotations

import itertools

import pytest

from hicache_ref.engines.sglang import unavailable_reason

_WHY = unavailable_reason()
pytestmark = [pytest.mark.needs_sglang, pytest.mark.skipif(_WHY is not None, reason=f"sglang engine: {_WHY}")]

SLICE = 12  # requests per trace slice (replayed twice: sglang_diff.slice_of)
POLICIES = ("write_back", "write_through", "write_through_selective")
PAGES = (1, 16, 64)
CASES = [dict(trace=t, policy=p, tight=c, page=ps, pd=pd) for t, p, c, ps, pd in
         itertools.product(("conversation_trace.jsonl", "synthetic_trace.jsonl"), POLICIES, (True, False), PAGES,
                           (False, True))]


def case_id(c: dict) -> str:
    return (f"{c['trace'].split('_')[0]}-{c['policy']}-{'tight' if c['tight'] else 'loose'}-p{c['page']}"
            f"{'-pd' if c['pd'] else ''}")


# case id -> why it differs today (the diff, summarised); handed to the preset's owner.
KNOWN_MISMATCHES: dict[str, str] = {
    'conversation-write_back-tight-p1':
        '2 of 24 requests differ; req 4: backed_up ref 13056 sglang 6246; req 6: backed_up ref 19072 sglang 25882; totals ref/sglang: l1_hit 11776/11776, l2_hit 147161/147161, l2_unloaded 0/0, backed_up 147161/147161, loaded_back 147161/147161',
    'conversation-write_back-tight-p1-pd':
        '2 of 24 requests differ; req 4: backed_up ref 13056 sglang 6246; req 6: backed_up ref 19072 sglang 25882; totals ref/sglang: l1_hit 11776/11776, l2_hit 147161/147161, l2_unloaded 0/0, backed_up 147161/147161, loaded_back 147161/147161',
    'conversation-write_back-tight-p16':
        '2 of 24 requests differ; req 4: backed_up ref 13040 sglang 6240; req 6: backed_up ref 19056 sglang 25856; totals ref/sglang: l1_hit 11776/11776, l2_hit 147136/147136, l2_unloaded 0/0, backed_up 147136/147136, loaded_back 147136/147136',
    'conversation-write_back-tight-p16-pd':
        '2 of 24 requests differ; req 4: backed_up ref 13040 sglang 6240; req 6: backed_up ref 19056 sglang 25856; totals ref/sglang: l1_hit 11776/11776, l2_hit 147136/147136, l2_unloaded 0/0, backed_up 147136/147136, loaded_back 147136/147136',
    'conversation-write_back-tight-p64':
        '2 of 24 requests differ; req 4: backed_up ref 12992 sglang 6208; req 6: backed_up ref 18944 sglang 25728; totals ref/sglang: l1_hit 11776/11776, l2_hit 146880/146880, l2_unloaded 0/0, backed_up 146880/146880, loaded_back 146880/146880',
    'conversation-write_back-tight-p64-pd':
        '2 of 24 requests differ; req 4: backed_up ref 12992 sglang 6208; req 6: backed_up ref 18944 sglang 25728; totals ref/sglang: l1_hit 11776/11776, l2_hit 146880/146880, l2_unloaded 0/0, backed_up 146880/146880, loaded_back 146880/146880',
    'conversation-write_back-loose-p1':
        '2 of 24 requests differ; req 9: backed_up ref 19780 sglang 6246; req 10: backed_up ref 0 sglang 13534; totals ref/sglang: l1_hit 11776/11776, l2_hit 207746/207746, l2_unloaded 0/0, backed_up 207746/207746, loaded_back 207746/207746',
    'conversation-write_back-loose-p1-pd':
        '2 of 24 requests differ; req 9: backed_up ref 19780 sglang 6246; req 10: backed_up ref 0 sglang 13534; totals ref/sglang: l1_hit 11776/11776, l2_hit 207746/207746, l2_unloaded 0/0, backed_up 207746/207746, loaded_back 207746/207746',
    'conversation-write_back-loose-p16':
        '2 of 24 requests differ; req 9: backed_up ref 19760 sglang 6240; req 10: backed_up ref 0 sglang 13520; totals ref/sglang: l1_hit 11776/11776, l2_hit 207680/207680, l2_unloaded 0/0, backed_up 207680/207680, loaded_back 207680/207680',
    'conversation-write_back-loose-p16-pd':
        '2 of 24 requests differ; req 9: backed_up ref 19760 sglang 6240; req 10: backed_up ref 0 sglang 13520; totals ref/sglang: l1_hit 11776/11776, l2_hit 207680/207680, l2_unloaded 0/0, backed_up 207680/207680, loaded_back 207680/207680',
    'conversation-write_back-loose-p64':
        '2 of 24 requests differ; req 9: backed_up ref 19712 sglang 6208; req 10: backed_up ref 0 sglang 13504; totals ref/sglang: l1_hit 11776/11776, l2_hit 207424/207424, l2_unloaded 0/0, backed_up 207424/207424, loaded_back 207424/207424',
    'conversation-write_back-loose-p64-pd':
        '2 of 24 requests differ; req 9: backed_up ref 19712 sglang 6208; req 10: backed_up ref 0 sglang 13504; totals ref/sglang: l1_hit 11776/11776, l2_hit 207424/207424, l2_unloaded 0/0, backed_up 207424/207424, loaded_back 207424/207424',
    'conversation-write_through_selective-tight-p1-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6758 sglang 0; req 1: backed_up ref 6810 sglang 512; req 2: backed_up ref 6724 sglang 0; req 3: backed_up ref 1778 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 147161/0, l2_unloaded 0/0, backed_up 147673/512, loaded_back 147161/0',
    'conversation-write_through_selective-tight-p16-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6752 sglang 0; req 1: backed_up ref 6800 sglang 512; req 2: backed_up ref 6720 sglang 0; req 3: backed_up ref 1776 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 147136/0, l2_unloaded 0/0, backed_up 147648/512, loaded_back 147136/0',
    'conversation-write_through_selective-tight-p64-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6720 sglang 0; req 1: backed_up ref 6784 sglang 512; req 2: backed_up ref 6720 sglang 0; req 3: backed_up ref 1728 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 146880/0, l2_unloaded 0/0, backed_up 147392/512, loaded_back 146880/0',
    'conversation-write_through_selective-loose-p1-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6758 sglang 0; req 1: backed_up ref 6810 sglang 512; req 2: backed_up ref 6724 sglang 0; req 3: backed_up ref 1778 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 207746/0, l2_unloaded 0/0, backed_up 208258/512, loaded_back 207746/0',
    'conversation-write_through_selective-loose-p16-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6752 sglang 0; req 1: backed_up ref 6800 sglang 512; req 2: backed_up ref 6720 sglang 0; req 3: backed_up ref 1776 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 207680/0, l2_unloaded 0/0, backed_up 208192/512, loaded_back 207680/0',
    'conversation-write_through_selective-loose-p64-pd':
        '24 of 24 requests differ; req 0: backed_up ref 6720 sglang 0; req 1: backed_up ref 6784 sglang 512; req 2: backed_up ref 6720 sglang 0; req 3: backed_up ref 1728 sglang 0; totals ref/sglang: l1_hit 11776/11776, l2_hit 207424/0, l2_unloaded 0/0, backed_up 207936/512, loaded_back 207424/0',
    'synthetic-write_back-loose-p1':
        '4 of 24 requests differ; req 6: backed_up ref 60409 sglang 36640; req 7: backed_up ref 0 sglang 23769; req 13: backed_up ref 41532 sglang 23479; req 14: backed_up ref 0 sglang 18053; totals ref/sglang: l1_hit 0/0, l2_hit 252948/252948, l2_unloaded 0/0, backed_up 252948/252948, loaded_back 252948/252948',
    'synthetic-write_back-loose-p1-pd':
        '4 of 24 requests differ; req 6: backed_up ref 60409 sglang 36640; req 7: backed_up ref 0 sglang 23769; req 13: backed_up ref 41532 sglang 23479; req 14: backed_up ref 0 sglang 18053; totals ref/sglang: l1_hit 0/0, l2_hit 252948/252948, l2_unloaded 0/0, backed_up 252948/252948, loaded_back 252948/252948',
    'synthetic-write_back-loose-p16':
        '4 of 24 requests differ; req 6: backed_up ref 60400 sglang 36640; req 7: backed_up ref 0 sglang 23760; req 13: backed_up ref 41520 sglang 23472; req 14: backed_up ref 0 sglang 18048; totals ref/sglang: l1_hit 0/0, l2_hit 252880/252880, l2_unloaded 0/0, backed_up 252880/252880, loaded_back 252880/252880',
    'synthetic-write_back-loose-p16-pd':
        '4 of 24 requests differ; req 6: backed_up ref 60400 sglang 36640; req 7: backed_up ref 0 sglang 23760; req 13: backed_up ref 41520 sglang 23472; req 14: backed_up ref 0 sglang 18048; totals ref/sglang: l1_hit 0/0, l2_hit 252880/252880, l2_unloaded 0/0, backed_up 252880/252880, loaded_back 252880/252880',
    'synthetic-write_back-loose-p64':
        '4 of 24 requests differ; req 6: backed_up ref 60352 sglang 36608; req 7: backed_up ref 0 sglang 23744; req 13: backed_up ref 41472 sglang 23424; req 14: backed_up ref 0 sglang 18048; totals ref/sglang: l1_hit 0/0, l2_hit 252608/252608, l2_unloaded 0/0, backed_up 252608/252608, loaded_back 252608/252608',
    'synthetic-write_back-loose-p64-pd':
        '4 of 24 requests differ; req 6: backed_up ref 60352 sglang 36608; req 7: backed_up ref 0 sglang 23744; req 13: backed_up ref 41472 sglang 23424; req 14: backed_up ref 0 sglang 18048; totals ref/sglang: l1_hit 0/0, l2_hit 252608/252608, l2_unloaded 0/0, backed_up 252608/252608, loaded_back 252608/252608',
    'synthetic-write_through_selective-tight-p1-pd':
        '24 of 24 requests differ; req 0: backed_up ref 31618 sglang 0; req 1: backed_up ref 31618 sglang 0; req 2: backed_up ref 23769 sglang 0; req 3: backed_up ref 31618 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 0/0, l2_unloaded 0/0, backed_up 455744/0, loaded_back 0/0',
    'synthetic-write_through_selective-tight-p16-pd':
        '24 of 24 requests differ; req 0: backed_up ref 31616 sglang 0; req 1: backed_up ref 31616 sglang 0; req 2: backed_up ref 23760 sglang 0; req 3: backed_up ref 31616 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 0/0, l2_unloaded 0/0, backed_up 455616/0, loaded_back 0/0',
    'synthetic-write_through_selective-tight-p64-pd':
        '20 of 24 requests differ; req 0: backed_up ref 31616 sglang 0; req 1: backed_up ref 31616 sglang 0; req 2: backed_up ref 23744 sglang 0; req 3: backed_up ref 31616 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 0/0, l2_unloaded 0/0, backed_up 455296/0, loaded_back 0/0',
    'synthetic-write_through_selective-loose-p1-pd':
        '24 of 24 requests differ; req 0: backed_up ref 40160 sglang 0; req 1: backed_up ref 36640 sglang 0; req 2: backed_up ref 23769 sglang 0; req 3: backed_up ref 32140 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 252948/0, l2_unloaded 0/0, backed_up 252948/0, loaded_back 252948/0',
    'synthetic-write_through_selective-loose-p16-pd':
        '24 of 24 requests differ; req 0: backed_up ref 40160 sglang 0; req 1: backed_up ref 36640 sglang 0; req 2: backed_up ref 23760 sglang 0; req 3: backed_up ref 32128 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 252880/0, l2_unloaded 0/0, backed_up 252880/0, loaded_back 252880/0',
    'synthetic-write_through_selective-loose-p64-pd':
        '20 of 24 requests differ; req 0: backed_up ref 40128 sglang 0; req 1: backed_up ref 36608 sglang 0; req 2: backed_up ref 23744 sglang 0; req 3: backed_up ref 32128 sglang 0; totals ref/sglang: l1_hit 0/0, l2_hit 252608/0, l2_unloaded 0/0, backed_up 252608/0, loaded_back 252608/0',
}


def _params():
    for c in CASES:
        cid = case_id(c)
        marks = [pytest.mark.xfail(reason=KNOWN_MISMATCHES[cid], strict=False)] if cid in KNOWN_MISMATCHES else []
        yield pytest.param(c, id=cid, marks=marks)


@pytest.fixture(scope="module")
def slices():
    from conformance.suites import sglang_diff

    return {t: sglang_diff.slice_of(t, SLICE) for t in ("conversation_trace.jsonl", "synthetic_trace.jsonl")}


@pytest.mark.parametrize("case", list(_params()))
def test_reference_matches_sglang_request_by_request(case, slices):
    from conformance.suites import sglang_diff

    requests = slices[case["trace"]]
    spec = sglang_diff.spec_for(requests, case["page"], case["policy"], case["tight"], case["pd"])
    ref = sglang_diff.reference_rows(spec, requests)
    up = sglang_diff.sglang_rows(spec, requests)
    assert len(ref) == len(up) == len(requests)
    diff = sglang_diff.diff_summary(ref, up)
    assert not diff, diff
