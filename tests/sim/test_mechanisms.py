"""The cost mechanisms one by one: per-segment submission, inline hold under concurrency, THP and
translation entries, NUMA placement, IDO on shared uplinks, D2H interference, unknown parameters."""

from __future__ import annotations

import pytest

from hardware_profiles import load_profile
from hicache_ref.sim import cost
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim.derive import with_values
from hicache_ref.sim.mechanisms import PAGE_4K, PAGE_THP, HostState, Traffic
from hicache_ref.sim.scenario import host_state, state
from hicache_ref.sim.serving import replay_served
from hicache_ref.sim.trace_synth import synthesize
from hicache_ref.spec import CacheSpec

GB = 10**9
# Round numbers, so each expectation below is arithmetic a reader can redo.
PROFILE = with_values(load_profile("p800"), **{
    "link.h2d_gbps": 10.0, "link.d2h_gbps": 10.0, "link.per_segment_us": 100.0, "link.per_launch_us": 10.0,
    "link.kernel_per_item_us": 0.02, "host_costs.submit_contention": 0.25, "host_costs.d2h_interference": 0.5,
    "host_costs.translation_slowdown_per_mentry": 0.01, "host_costs.numa_remote_bw_factor": 0.4,
    "host_costs.ido_shared_d2h_factor": 0.5, "host_costs.registered_slowdown_per_gb": 0.0})


@pytest.fixture(scope="module")
def trace():
    return synthesize(150, 500, 4000, 0.7, sessions=10, rate=20, seed=8)


# per-segment and per-launch submission

@pytest.mark.parametrize("segments", [0, 78, 39_936])
def test_direct_submission_is_per_launch_plus_per_segment(segments):
    t = Traffic(bytes=1 << 30, segments=segments, launches=3)
    assert mech.submission_seconds(PROFILE, t) == pytest.approx(3 * 10e-6 + segments * 100e-6)


def test_submission_grows_linearly_with_segments_at_the_profiles_per_segment_cost():
    p = load_profile("p800")
    sub = [mech.submission_seconds(p, Traffic(segments=k, launches=1)) for k in (78, 39_936, 79_872)]
    # the seed's all-layer transfer: 39,936 segments in page_first_direct against 78 in layer_first
    assert sub[1] - sub[0] == pytest.approx((39_936 - 78) * p.link.per_segment_us * 1e-6)
    assert sub[2] - sub[1] == pytest.approx(sub[1] - sub[0] + 78 * p.link.per_segment_us * 1e-6)
    assert sub[1] > 100 * sub[0]


def test_a_kernel_copy_ignores_segments_and_pays_per_item():
    k = dict(bytes=10 * GB, launches=78, items=4096 * 78, kernel=True)
    assert mech.submission_seconds(PROFILE, Traffic(segments=39_936, **k)) == \
        mech.submission_seconds(PROFILE, Traffic(segments=0, **k)) == pytest.approx(78 * 10e-6)
    dev = mech.device_seconds(PROFILE, "h2d", Traffic(segments=39_936, **k), HostState())
    assert dev == pytest.approx(10 * GB / 10e9 + 4096 * 78 * 0.02e-6)
    direct = Traffic(bytes=10 * GB, segments=39_936, launches=78, items=4096 * 78)  # items unpriced for direct
    assert mech.device_seconds(PROFILE, "h2d", direct, HostState()) == pytest.approx(1.0)


@pytest.mark.slow
def test_a_replays_page_first_direct_traffic_costs_more_submission_than_layer_first(trace):
    base = CacheSpec.of(page_size=64, l1_tokens=8000, l2_tokens=60_000, profile="p800", concurrency=4)
    runs = {layout: replay_served(base.replace(host_layout=layout, io_backend=io), trace)
            for layout, io in (("page_first_direct", "direct"), ("layer_first", "kernel"))}
    p = load_profile("p800")
    pfd, lf = (cost.traffic(runs[k], "d2h") for k in ("page_first_direct", "layer_first"))
    assert pfd.bytes == lf.bytes > 0 and pfd.segments > 10 * lf.launches
    assert mech.submission_seconds(p, pfd) == pytest.approx(
        pfd.launches * p.link.per_launch_us * 1e-6 + pfd.segments * p.link.per_segment_us * 1e-6)
    assert mech.submission_seconds(p, pfd) > 10 * mech.submission_seconds(p, lf)


# inline submission holds the scheduler: every queued request waits

@pytest.mark.parametrize("concurrency", [2, 8])
def test_inline_hold_adds_concurrency_x_hold_over_requests_to_the_mean_ttft(trace, concurrency):
    spec = CacheSpec.of(page_size=64, l1_tokens=8000, l2_tokens=60_000, profile="p800", concurrency=concurrency,
                        host_layout="page_first_direct", io_backend="direct")
    fig = replay_served(spec, trace)
    assert fig["concurrency"] == concurrency and fig["d2h_segments"] > 1000
    p = with_values(PROFILE, **{"host_costs.d2h_interference": 0.0})  # the hold alone
    h2d, d2h = cost.traffic(fig, "h2d"), cost.traffic(fig, "d2h")
    hold = mech.submission_seconds(p, d2h)
    assert hold > 1.0

    def ttft(backups, submission):
        svc = mech.service(p, cost.prefill_seconds(p, fig), fig["l2_hit_requests"], h2d, backups,
                           HostState(submission=submission))
        return mech.mean_ttft_seconds(svc.total, fig["requests"], fig["concurrency"]), svc

    ttft_none, _ = ttft(Traffic(), "inline")  # the same run had it backed nothing up
    ttft_inline, svc = ttft(d2h, "inline")
    assert svc.hold == pytest.approx(hold)
    assert svc.total == pytest.approx(cost.run_service(p, fig, HostState(submission="inline")).total)
    assert ttft_inline - ttft_none == pytest.approx(concurrency * hold / fig["requests"])
    ttft_daemon, svc = ttft(d2h, "daemon")  # a backup thread: the scheduler keeps only the contention share
    assert svc.hold == pytest.approx(0.25 * hold)
    assert ttft_daemon - ttft_none == pytest.approx(concurrency * 0.25 * hold / fig["requests"])


def test_mean_ttft_is_little_law_over_the_closed_loop():
    assert mech.mean_ttft_seconds(30.0, 10, 4) == pytest.approx(12.0)
    assert mech.mean_ttft_seconds(30.0, 10, None) == pytest.approx(3.0)  # serial: each request alone
    assert mech.mean_ttft_seconds(30.0, 0, 4) == 0.0


# registration: translation entries, so THP changes it

def test_thp_cuts_the_translation_entries_and_the_dma_slowdown_by_512():
    reg = 80 * 2**30
    small, huge = HostState(registered_bytes=reg, host_page_bytes=PAGE_4K), HostState(registered_bytes=reg)
    assert huge.host_page_bytes == PAGE_THP == 512 * PAGE_4K
    assert small.translation_entries == reg // 4096 == 512 * huge.translation_entries
    plain = mech.dma_gbps(PROFILE, "h2d", HostState())  # nothing registered: no translation cost
    assert plain == pytest.approx(10.0)
    slow_4k = plain / mech.dma_gbps(PROFILE, "h2d", small) - 1  # the slowdown beyond 1
    slow_thp = plain / mech.dma_gbps(PROFILE, "h2d", huge) - 1
    assert slow_4k == pytest.approx(0.01 * small.translation_entries / 1e6)  # ~21M entries: +21%
    assert slow_4k / slow_thp == pytest.approx(512)
    # what a transfer pays beyond its bytes at full bandwidth falls by the same ratio
    t = Traffic(bytes=10 * GB)
    extra = [mech.device_seconds(PROFILE, "d2h", t, s) - 1.0 for s in (small, huge)]
    assert extra[0] / extra[1] == pytest.approx(512) and extra[0] == pytest.approx(slow_4k)


def test_registered_bytes_slow_dma_by_their_own_cost_whatever_the_page_size():
    p = with_values(PROFILE, **{"host_costs.registered_slowdown_per_gb": 0.002,
                                "host_costs.translation_slowdown_per_mentry": 0.0})
    for page in (PAGE_4K, PAGE_THP):  # huge pages cut the entries, not this cost
        slow = [10.0 / mech.dma_gbps(p, "d2h", HostState(registered_bytes=gb * GB, host_page_bytes=page)) - 1
                for gb in (75, 600)]
        assert slow == pytest.approx([0.15, 1.2])  # 0.002 per GB: a pool past the plateau costs DMA time


def test_translation_cost_grows_with_registered_bytes():
    entries = [HostState(registered_bytes=gb * GB, host_page_bytes=PAGE_4K) for gb in (15, 80)]
    slow = [10.0 / mech.dma_gbps(PROFILE, "d2h", s) - 1 for s in entries]
    assert slow[1] / slow[0] == pytest.approx(entries[1].translation_entries / entries[0].translation_entries)


# NUMA placement

def test_remote_numa_scales_bandwidth_by_its_factor_and_interleaved_memory_runs_at_local_bandwidth():
    local = mech.dma_gbps(PROFILE, "h2d", HostState(numa="local"))
    assert mech.dma_gbps(PROFILE, "h2d", HostState(numa="remote", numa_nodes=8)) == pytest.approx(local * 0.4)
    assert mech.dma_gbps(PROFILE, "h2d", HostState(numa="one_to_one", numa_nodes=8)) == pytest.approx(local * 0.4)
    for n in (1, 2, 8):  # the shared pool is interleaved already: binding is optional, no remote penalty
        assert mech.dma_gbps(PROFILE, "h2d", HostState(numa="interleave", numa_nodes=n)) == pytest.approx(local)
    assert mech.dma_gbps(PROFILE, "h2d", HostState(numa="one_to_one", numa_nodes=1)) == pytest.approx(local)


# IDO on a shared uplink

@pytest.mark.parametrize(("writers", "ido", "numa", "factor"), [
    (2, False, "one_to_one", 0.5), (2, True, "one_to_one", 1.0), (1, False, "one_to_one", 1.0),
    (1, True, "one_to_one", 1.0), (4, False, "one_to_one", 0.5),
    (2, False, "local", 1.0), (2, False, "remote", 1.0), (2, False, "interleave", 1.0)])
def test_ido_factor_only_when_cards_of_one_uplink_write_to_different_nodes_without_ido(writers, ido, numa, factor):
    # one-to-one binding (card i on node i) is the placement whose writes strict ordering blocks
    s = HostState(writers_per_uplink=writers, ido=ido, numa=numa, numa_nodes=8)
    placed = 10.0 * mech.numa_factor(PROFILE, s)  # the NUMA factor aside
    assert mech.strict_ordering(s) is (factor < 1)
    assert mech.dma_gbps(PROFILE, "d2h", s) == pytest.approx(placed * factor)
    assert mech.dma_gbps(PROFILE, "h2d", s) == pytest.approx(placed)  # loads are not the shared writes


def test_a_tp_shared_pool_has_one_writer_per_uplink_and_private_pools_one_per_card():
    p = load_profile("p800")  # 2 cards per uplink
    private = host_state(state(), p, 1000, 89_856, 8)
    shared = host_state(state(tp_shared=True), p, 1000, 89_856, 8)
    assert private.writers_per_uplink == 2 and shared.writers_per_uplink == 1
    assert shared.registered_bytes == 8 * private.registered_bytes == 8 * 1000 * 89_856  # one pool of the group
    one_to_one = [host_state(state(tp_shared=t, numa="one_to_one"), p, 1000, 89_856, 8) for t in (False, True)]
    # only the private pools' two writers per uplink are held up by strict ordering
    assert mech.dma_gbps(PROFILE, "d2h", one_to_one[1]) > mech.dma_gbps(PROFILE, "d2h", one_to_one[0])
    assert host_state(state(hicache=False), p, 1000, 89_856, 8).translation_entries == 0  # no host pool


# D2H interference

def test_inline_hides_device_time_behind_the_hold_and_daemon_does_not():
    dev_s = 1.0  # 10 GB at 10 GB/s
    for segments, sub in ((1000, 0.1), (20_000, 2.0)):
        t = Traffic(bytes=10 * GB, segments=segments, launches=0)
        assert mech.submission_seconds(PROFILE, t) == pytest.approx(sub)
        hold, interference = mech.backup_seconds(PROFILE, t, HostState(submission="inline"))
        assert hold == pytest.approx(sub) and interference == pytest.approx(0.5 * max(0.0, dev_s - sub))
        hold, interference = mech.backup_seconds(PROFILE, t, HostState(submission="daemon"))
        assert hold == pytest.approx(0.25 * sub) and interference == pytest.approx(0.5 * dev_s)
    assert mech.backup_seconds(PROFILE, Traffic(), HostState()) == (0.0, 0.0)  # nothing backed up


def test_service_adds_each_mechanism_once():
    h2d = Traffic(bytes=GB, segments=100, launches=2)
    d2h = Traffic(bytes=2 * GB, segments=50, launches=1)
    svc = mech.service(PROFILE, 5.0, 3, h2d, d2h, HostState(submission="inline"))
    assert svc.compute == 5.0 and svc.l2_path == pytest.approx(3 * PROFILE.compute.l2_path_fixed_s)
    assert svc.load == pytest.approx(2 * 10e-6 + 100 * 100e-6 + 0.1)
    assert svc.hold == pytest.approx(10e-6 + 50 * 100e-6)
    assert svc.interference == pytest.approx(0.5 * (0.2 - svc.hold))
    assert svc.total == pytest.approx(svc.compute + svc.l2_path + svc.load + svc.hold + svc.interference)
    assert svc.to_json()["total"] == svc.total


# unknown parameters

@pytest.mark.parametrize(("key", "host", "traffic"), [
    ("host_costs.numa_remote_bw_factor", HostState(numa="remote"), Traffic(bytes=GB)),
    ("host_costs.numa_remote_bw_factor", HostState(numa="one_to_one", numa_nodes=8), Traffic(bytes=GB)),
    ("host_costs.translation_slowdown_per_mentry", HostState(registered_bytes=GB), Traffic(bytes=GB)),
    ("host_costs.registered_slowdown_per_gb", HostState(registered_bytes=GB), Traffic(bytes=GB)),
    ("host_costs.ido_shared_d2h_factor", HostState(writers_per_uplink=2, ido=False, numa="one_to_one"),
     Traffic(bytes=GB)),
    ("host_costs.d2h_interference", HostState(), Traffic(bytes=GB, launches=1)),
    ("host_costs.submit_contention", HostState(submission="daemon"), Traffic(bytes=GB, launches=1)),
    ("link.per_segment_us", HostState(), Traffic(bytes=GB, segments=10, launches=1)),
    ("link.kernel_per_item_us", HostState(), Traffic(bytes=GB, launches=1, items=10, kernel=True)),
])
def test_a_mechanism_with_work_and_no_parameter_is_unpriced_naming_the_key(key, host, traffic):
    p = with_values(PROFILE, **{key: None})
    with pytest.raises(mech.Unpriced, match=f"profile p800 has no {key}$"):
        mech.service(p, 1.0, 0, Traffic(), traffic, host)
    assert issubclass(mech.Unpriced, ValueError)


def test_a_mechanism_without_work_needs_no_parameter():
    p = with_values(PROFILE, **{k: None for k in ("host_costs.numa_remote_bw_factor", "host_costs.d2h_interference",
                                                  "host_costs.translation_slowdown_per_mentry",
                                                  "compute.l2_path_fixed_s", "link.per_segment_us")})
    svc = mech.service(p, 2.0, 0, Traffic(bytes=GB, launches=1, items=8, kernel=True), Traffic(), HostState())
    assert svc.compute == 2.0 and svc.load > 0 and svc.hold == svc.interference == svc.l2_path == 0.0
    with pytest.raises(mech.Unpriced, match="compute.l2_path_fixed_s"):
        mech.service(p, 2.0, 1, Traffic(), Traffic(), HostState())


@pytest.mark.parametrize(("kw", "name"), [(dict(submission="thread"), "submission"), (dict(numa="near"), "numa"),
                                          (dict(host_page_bytes=0), "host_page_bytes"),
                                          (dict(writers_per_uplink=True), "writers_per_uplink"),
                                          (dict(numa_nodes=1.5), "numa_nodes"),
                                          (dict(registered_bytes=-1), "registered_bytes")])
def test_host_state_refuses_bad_values_naming_the_field(kw, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        HostState(**kw)
