"""hal.memory.numa syscalls on node 0 of this machine: policies set, queried, restored; pages located."""

from __future__ import annotations

import errno
import mmap
import threading

import numpy as np
import pytest

from hal.memory import numa, vm


def _address(m: mmap.mmap) -> int:
    view = np.frombuffer(m, dtype=np.uint8)
    try:
        return view.ctypes.data
    finally:
        del view  # an exported buffer would stop m.close()


@pytest.fixture(autouse=True)
def _default_policy_after():
    yield
    numa.set_mempolicy(numa.MPOL_DEFAULT)


@pytest.mark.parametrize(
    "text, nodes", [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0,2-3,7\n", [0, 2, 3, 7]), ("", [])]
)
def test_online_nodes_reads_the_sysfs_list_format(tmp_path, monkeypatch, text, nodes):
    online = tmp_path / "online"
    online.write_text(text)
    monkeypatch.setattr(numa, "NODE_ONLINE_PATH", str(online))
    assert numa.online_nodes() == nodes


@pytest.mark.parametrize("text", ["3-1", "0-", "a", "0,,x"])
def test_malformed_online_list_is_rejected_naming_the_file(tmp_path, monkeypatch, text):
    # The same parser (and strictness) as hal.topology.model's cpulists: a reversed range is not "no nodes".
    online = tmp_path / "online"
    online.write_text(text)
    monkeypatch.setattr(numa, "NODE_ONLINE_PATH", str(online))
    with pytest.raises(ValueError, match=f"^{online}"):
        numa.online_nodes()


def test_node0_is_online():
    assert 0 in numa.online_nodes()


@pytest.mark.parametrize("bad", [[], [0, 0], [True], ["0"], [0.5], [4095], [-1]])
def test_validate_nodes_rejects(bad):
    with pytest.raises(ValueError, match="^numa: "):
        numa.validate_nodes(bad, arg="numa")


def test_validate_nodes_sorts():
    assert numa.validate_nodes((0,)) == [0]


@pytest.mark.parametrize("mode", [numa.MPOL_BIND, numa.MPOL_INTERLEAVE, numa.MPOL_PREFERRED])
def test_set_then_get_thread_policy(mode):
    numa.set_mempolicy(mode, [0])
    assert numa.get_mempolicy() == (mode, [0])
    numa.set_mempolicy(numa.MPOL_DEFAULT)
    assert numa.get_mempolicy() == (numa.MPOL_DEFAULT, [])


def test_thread_policy_restores_previous_after_body_and_after_errors():
    numa.set_mempolicy(numa.MPOL_INTERLEAVE, [0])
    with numa.thread_policy(numa.MPOL_BIND, [0]):
        assert numa.get_mempolicy() == (numa.MPOL_BIND, [0])
    assert numa.get_mempolicy() == (numa.MPOL_INTERLEAVE, [0])

    with pytest.raises(KeyError), numa.thread_policy(numa.MPOL_BIND, [0]):
        raise KeyError("body fails")
    assert numa.get_mempolicy() == (numa.MPOL_INTERLEAVE, [0])

    offline = max(numa.online_nodes()) + 1
    with pytest.raises(OSError) as info, numa.thread_policy(numa.MPOL_BIND, [offline]):
        pass
    assert info.value.errno == errno.EINVAL
    assert numa.get_mempolicy() == (numa.MPOL_INTERLEAVE, [0])


def test_policy_is_per_thread():
    # allocate_host relies on the thread policy affecting the calling thread only
    # (threads created inside the region would inherit it, so it creates none).
    seen, policy_set = [], threading.Event()

    def other():
        policy_set.wait()
        seen.append(numa.get_mempolicy())

    t = threading.Thread(target=other)
    t.start()
    with numa.thread_policy(numa.MPOL_BIND, [0]):
        policy_set.set()
        t.join()
    assert seen == [(numa.MPOL_DEFAULT, [])]


def test_mbind_sets_range_policy_and_move_pages_locates_pages():
    length = 8 * vm.PAGE
    m = mmap.mmap(-1, length)
    start = _address(m)
    try:
        numa.mbind(start, length, numa.MPOL_BIND, [0])
        assert numa.get_mempolicy(start) == (numa.MPOL_BIND, [0])
        m[0:1] = b"x"  # fault in the first page only
        status = numa.move_pages_query([start, start + vm.PAGE])
        assert status.tolist() == [0, -errno.ENOENT]
    finally:
        m.close()


def test_mbind_rejects_unaligned_address():
    m = mmap.mmap(-1, 2 * vm.PAGE)
    start = _address(m)
    try:
        with pytest.raises(OSError) as info:
            numa.mbind(start + 1, vm.PAGE, numa.MPOL_BIND, [0])
        assert info.value.errno == errno.EINVAL
    finally:
        m.close()


def test_move_pages_of_nothing_is_empty():
    assert len(numa.move_pages_query([])) == 0
