"""io_backend kernel vs direct: pricing by hand, direct's host-index sort and layout switch.

Geometry: MHA, 2 layers, 1 head, head_dim 4, fp16, page_size 2, so one token of one part in
one layer is 8 bytes and a page of one part in one layer 16 bytes. Profile emu: 10 us per
launch, 1 us per segment, 0.01 us per kernel item (assumed), 7.4 GB/s both ways.
"""

import dataclasses
import json

import numpy as np
import pytest

from conformance.cli.main import main
from hal.backend import get_backend
from hal.transfer.io_backend import direct_order, effective_host_layout
from hardware_profiles.loader import load_profile
from hicache_ref.core.controller import CacheController
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec

PS = 2
SPEC = CacheSpec.of(page_size=PS, attention="mha", layers=2, heads=1, kv_dim=4, dtype="fp16")
GEOM = SPEC.geometry.kv()


@pytest.fixture(scope="module")
def count():
    return get_backend("count", "emu")


def _controller(count, io_backend, layout="layer_first"):
    dp = DevicePool(GEOM, 16, backend=count, materialize=True)
    hp = HostPool(GEOM, 16, layout, backend=count, materialize=True, io_backend=io_backend)
    return CacheController(dp, hp, count)


def _load(count, io_backend, host_pages, device_pages, layout="layer_first"):
    with _controller(count, io_backend, layout) as c:
        c.load_pages(np.array(host_pages), np.array(device_pages)).wait_all()
        c.flush()
        return c.stats().h2d


def test_a_load_priced_by_hand_for_both_io_backends(count):
    # Load host pages [0 1] into device pages [2 3]: 4 tokens, contiguous on both sides, so per
    # layer one segment per part (K, V): 2 layers x 2 parts = 4 segments, 2 launches (one per
    # layer), 4 tokens x 2 parts x 2 layers x 8 B = 128 bytes, 4 tokens x 2 layers = 8 items.
    link = load_profile("emu").link
    assert (link.per_launch_us, link.per_segment_us, link.kernel_per_item_us) == (10.0, 1.0, 0.01)
    wire = 128 / 7.4e9
    direct = _load(count, "direct", [0, 1], [2, 3])
    kernel = _load(count, "kernel", [0, 1], [2, 3])
    for s in (direct, kernel):
        assert (s.bytes, s.segments, s.launches, s.transfers, s.tokens) == (128, 4, 2, 1, 4)
    assert direct.modeled_seconds == pytest.approx(2 * 10e-6 + 4 * 1e-6 + wire, rel=1e-12)
    assert kernel.modeled_seconds == pytest.approx(2 * 10e-6 + 8 * 0.01e-6 + wire, rel=1e-12)


def test_kernel_pricing_is_unknown_without_a_per_item_cost():
    link = dataclasses.replace(load_profile("h200").link, kernel_per_item_us=None)
    assert link.kernel_seconds("h2d", 0, 0, 0) == 0.0
    assert link.kernel_seconds("h2d", 128, 8, 2) is None  # not modeled, rather than guessed


def test_direct_with_layer_first_sorts_host_indices_and_runs_merge(count):
    # Pairs (host 2 -> device 1), (host 1 -> device 0): in the order given neither side steps
    # forward, 2 runs per (part, layer) = 8 segments; host-sorted they are (1 -> 0), (2 -> 1),
    # one run each = 4 segments.
    assert _load(count, None, [2, 1], [1, 0]).segments == 8
    assert _load(count, "kernel", [2, 1], [1, 0]).segments == 8  # kernels copy in the order given
    assert _load(count, "direct", [2, 1], [1, 0]).segments == 4
    hi, di = direct_order("layer_first", "direct", np.array([6, 7, 2, 3]), np.array([0, 1, 4, 5]))
    assert (hi.tolist(), di.tolist()) == ([2, 3, 6, 7], [4, 5, 0, 1])
    hi, di = direct_order("page_first_direct", "direct", np.array([6, 2]), np.array([0, 4]))
    assert (hi.tolist(), di.tolist()) == ([6, 2], [0, 4])  # only layer_first is sorted


def test_direct_switches_page_first_to_page_first_direct(count):
    assert effective_host_layout("page_first", "direct") == "page_first_direct"
    assert effective_host_layout("page_first", "kernel") == "page_first"
    assert effective_host_layout("layer_first", "direct") == "layer_first"
    hp = HostPool(GEOM, 16, "page_first", backend=count, materialize=True, io_backend="direct")
    assert (hp.given_layout, hp.layout) == ("page_first", "page_first_direct")
    reqs = [TraceRequest(0, 4 * PS, 1, (1, 2)), TraceRequest(1, 4 * PS, 1, (1, 2))]
    for io, effective in (("direct", "page_first_direct"), ("kernel", "page_first")):
        fig = replay(SPEC.replace(**{"host_layout": "page_first", "io_backend": io}), reqs)
        assert (fig["io_backend"], fig["host_layout"], fig["effective_host_layout"]) == (io, "page_first", effective)


def test_replay_reports_launches_per_direction_and_refuses_bad_io_backends(capsys):
    with pytest.raises(ValueError, match="^--io-backend"):
        CacheSpec.of(io_backend="dma")
    with pytest.raises(ValueError, match="io_backend"):
        HostPool(GEOM, 16, "layer_first", io_backend="dma")
    assert main(["replay", "--limit", "20", "--l1-tokens", "200K", "--l2-tokens", "1M", "--io-backend", "kernel",
                 "--json", "--quiet"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert fig["io_backend"] == "kernel" and fig["d2h_launches"] == fig["d2h_transfers"] > 0
    assert fig["h2d_launches"] == fig["h2d_transfers"] * SPEC.geometry.layers
    assert main(["replay", "--limit", "2", "--host-layout", "page_first", "--json", "--quiet"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["effective_host_layout"] == "page_first_direct"
    assert "--host-layout page_first is used as page_first_direct with --io-backend direct" in out.err
    assert main(["replay", "--io-backend", "dma"]) != 0
    assert "--io-backend: invalid choice: 'dma'" in capsys.readouterr().err
