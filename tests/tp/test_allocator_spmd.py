"""SPMD determinism of upstream's free-list orders: real rank processes make the same allocator decisions."""

from __future__ import annotations

import pytest

from hicache_ref.tp.launch import launch
from hicache_ref.tp.report import report
from hicache_ref.tp.workload import WorkloadConfig

pytestmark = pytest.mark.slow  # real rank processes


@pytest.mark.parametrize("order", ["upstream_l1", "upstream_l1_sorted"])
def test_two_ranks_agree_and_a_rerun_reproduces_the_report(order):
    cfg = WorkloadConfig(ops=80, seed=11, free_list=order)
    a, b = (report(cfg, launch(cfg, 2)[0].payload) for _ in range(2))
    assert a["consistent"] and a["free_list"] == order
    assert a == b
    fifo = WorkloadConfig(ops=80, seed=11, free_list="fifo")
    assert report(fifo, launch(fifo, 2)[0].payload)["digest"] != a["digest"]  # the order was really used
