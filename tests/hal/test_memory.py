"""hal.memory.host host buffers on this machine: THP coverage, NUMA placement, registration rollback, shared-file hygiene."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from hal.backend import Backend
from hal.memory import numa, shm, vm
from hal.memory.host import allocate_host, attach_host
from tests import checked_run
from tests.mounts import mounted_tmpfs

MB = 1 << 20


def _thp_skip_reason() -> str | None:
    try:
        with open(vm.THP_ENABLED_PATH) as f:
            mode = f.read()
    except OSError:
        return "kernel has no transparent huge pages"
    return f"THP is disabled ({mode.strip()})" if "[never]" in mode else None


def _mapped(start: int, length: int) -> bool:
    """Whether any VMA of this process overlaps [start, start+length)."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo < start + length and start < hi:
                return True
    return False


def _locked_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


@pytest.fixture
def huge_tmpfs(tmp_path):
    with mounted_tmpfs(tmp_path / "huge", "huge=always,size=400M,mode=0700") as d:
        yield d


@pytest.fixture
def plain_tmpfs(tmp_path):
    with mounted_tmpfs(tmp_path / "plain", "size=64M,mode=0700") as d:
        yield d


class MlockBackend(Backend):
    """Registers by mlock (what pinning does); can fail on chunk `fail_at` to test rollback."""

    name = "mlock-test"

    def __init__(self, fail_at: int | None = None):
        super().__init__(None)
        self.fail_at, self.calls, self.live = fail_at, [], []
        self._libc = ctypes.CDLL(None, use_errno=True)

    @classmethod
    def probe(cls):
        return True, ""

    def _register_range(self, address, nbytes):
        k = len(self.calls)
        self.calls.append(("register", k, address, nbytes))
        if k == self.fail_at:
            raise OSError(f"injected failure registering chunk {k}")
        if self._libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(nbytes)) != 0:
            raise OSError(ctypes.get_errno(), "mlock")
        self.live.append(k)
        return (k, address, nbytes)

    def _unregister_range(self, handle):
        k, address, nbytes = handle
        self.calls.append(("unregister", k, address, nbytes))
        self._libc.munlock(ctypes.c_void_p(address), ctypes.c_size_t(nbytes))
        self.live.remove(k)

    def alloc_device(self, shape, dtype):
        raise NotImplementedError

    def new_stream(self):
        raise NotImplementedError

    def default_stream(self):
        raise NotImplementedError

    def _execute(self, plan, stream):
        raise NotImplementedError


# -- huge pages ---------------------------------------------------------------------------


@pytest.mark.skipif(_thp_skip_reason() is not None, reason=str(_thp_skip_reason()))
def test_anonymous_256mb_is_on_huge_pages_only_when_asked():
    with allocate_host(256 * MB, huge_pages=True) as on:
        r = on.report()
        assert r["huge_page_coverage"] >= 0.99, r
        assert r["warnings"] == []
    with allocate_host(256 * MB, huge_pages=False) as off:
        assert off.report()["huge_page_coverage"] <= 0.01


@pytest.mark.skipif(_thp_skip_reason() is not None, reason=str(_thp_skip_reason()))
def test_pages_the_fault_left_small_are_collapsed_before_registration(monkeypatch):
    """A fragmented host gives the fault 4 KB pages (no madvise stands in for that here): the
    pool still ends on 2 MB pages, and registration sees them so."""
    monkeypatch.setattr("hal.memory.host.madvise_huge", lambda *a: None)
    seen = []

    class Recording(MlockBackend):
        def _register_range(self, address, nbytes):
            seen.append(vm.smaps_range(address, nbytes).get("AnonHugePages", 0))
            return super()._register_range(address, nbytes)

    with allocate_host(64 * MB, huge_pages=True, backend=Recording()) as buf:
        assert buf.report()["huge_page_coverage"] >= 0.99
    assert seen == [64 * MB], seen


def test_shared_file_on_huge_tmpfs_is_on_huge_pages(huge_tmpfs):
    with allocate_host(256 * MB, shared_dir=huge_tmpfs) as buf:
        r = buf.report()
        assert r["shared"] and r["huge_page_coverage"] >= 0.99, r
        assert os.listdir(huge_tmpfs) == []  # single user: unlinked right after mapping
    assert os.listdir(huge_tmpfs) == []


def test_shared_file_on_plain_tmpfs_warns_4kb_pages_when_nothing_collapses_them(plain_tmpfs, monkeypatch):
    monkeypatch.setattr("hal.memory.host.collapse_huge", lambda *a: "unsupported")  # a kernel before 6.1
    with allocate_host(8 * MB, shared_dir=plain_tmpfs) as buf:
        r = buf.report()
        assert r["huge_page_coverage"] <= 0.01
        assert any("mounted without huge=" in w and "4 KB" in w for w in r["warnings"]), r["warnings"]


def test_page_size_warnings_appear_only_when_pages_came_out_small(plain_tmpfs):
    """On a kernel whose MADV_COLLAPSE moves tmpfs pages the mount did not make huge, the mount's
    warning would be wrong; where the pages stay small it names the mount."""
    with allocate_host(8 * MB, shared_dir=plain_tmpfs) as buf:
        r = buf.report()
        if r["huge_page_coverage"] >= vm.WELL_COVERED:
            assert r["warnings"] == [], r
        else:
            assert any("mounted without huge=" in w for w in r["warnings"]), r


@pytest.mark.parametrize("collapse, cause", [("failed: EBUSY", "cgroup memory limit"),
                                             ("failed: ENOMEM", "no free memory"), ("failed: EAGAIN", "busy")])
def test_a_failed_collapse_says_why_by_its_errno(monkeypatch, collapse, cause):
    monkeypatch.setattr("hal.memory.host.collapse_huge", lambda *a: collapse)
    monkeypatch.setattr("hal.memory.host.madvise_huge", lambda *a: None)  # the fault gives 4 KB pages
    with allocate_host(8 * MB) as buf:
        r = buf.report()
    if r["huge_page_coverage"] < vm.WELL_COVERED:
        assert any(collapse in w and cause in w for w in r["warnings"]), r["warnings"]


PR_SET_THP_DISABLE = 41


@pytest.fixture
def thp_disabled_for_this_process():
    """THP off for this process, as a launcher's prctl(PR_SET_THP_DISABLE) leaves every child."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        pytest.skip(f"prctl(PR_SET_THP_DISABLE): {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        libc.prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0)


def test_a_process_with_thp_disabled_is_told_so_not_fragmentation(thp_disabled_for_this_process, plain_tmpfs):
    """The pages are 4 KB because the process has THP off: the report says that (and what the
    collapse met), never the fault's want of free 2 MB blocks, for new and attached buffers."""
    assert vm.thp_process_disabled()
    with allocate_host(8 * MB) as anon, allocate_host(8 * MB, shared_dir=plain_tmpfs, keep_name=True) as shared:
        with attach_host(shared.shared_path) as attached:
            for buf in (anon, shared, attached):
                r = buf.report()
                assert r["huge_page_coverage"] <= 0.01 and r["huge_page_collapse"] == "disabled", r
                assert any("PR_SET_THP_DISABLE" in w for w in r["warnings"]), r["warnings"]
                assert not any("fragmentation" in w for w in r["warnings"]), r["warnings"]


def test_a_process_status_without_thp_off_says_nothing(tmp_path):
    status = tmp_path / "status"
    for text, off in (("Name:\tpython\nTHP_enabled:\t0\n", True), ("THP_enabled:\t1\n", False),
                      ("Name:\tpython\n", False)):
        status.write_text(text)
        assert vm.thp_process_disabled(str(status)) is off
        assert (vm.thp_disabled_reason(True, status=str(status)) == vm.PROCESS_DISABLED) is off
    assert vm.thp_process_disabled(str(tmp_path / "absent")) is False


def test_size_is_rounded_up_but_reported_as_requested():
    with allocate_host(3 * MB + 5, huge_pages=True) as buf:
        assert buf.tensor.numel() == 3 * MB + 5 and buf.tensor.dtype == torch.uint8
        r = buf.report()
        assert r["bytes"] == 3 * MB + 5 and r["mapped_bytes"] == 4 * MB
        assert buf.address % vm.HUGE_PAGE == 0
    with allocate_host(5000, huge_pages=False) as small:
        assert small.report()["mapped_bytes"] == 2 * vm.PAGE


# -- NUMA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bind", "interleave"])
def test_policy_on_node0_is_applied_and_achieved(mode):
    before = numa.get_mempolicy()
    with allocate_host(16 * MB, numa=(mode, [0])) as buf:
        r = buf.report()
        assert r["policy_requested"] == {"mode": mode, "nodes": [0]}
        assert r["policy_achieved"] is True
        assert r["numa_pages"] == {0: 16 * MB // vm.PAGE}
        assert numa.get_mempolicy(buf.address) == (numa.MODES[mode], [0])  # the range keeps it
    assert numa.get_mempolicy() == before  # the thread's policy is back


def test_shared_dir_without_room_is_refused_before_anything_is_made(tmp_path):
    with mounted_tmpfs(tmp_path / "tiny", "size=4M") as d:
        before = numa.get_mempolicy()
        with pytest.raises(ValueError, match="^shared_dir: .* bytes free"):
            allocate_host(16 * MB, numa=("bind", [0]), shared_dir=d, huge_pages=False)
        assert numa.get_mempolicy() == before
        assert os.listdir(d) == []


# -- registration -------------------------------------------------------------------------


def test_chunked_registration_and_idempotent_close():
    be = MlockBackend()
    locked0 = _locked_kb()
    buf = allocate_host(10 * MB, backend=be, register_chunk_bytes=4 * MB)
    r = buf.report()
    assert r["registered_bytes"] == 10 * MB and r["register_chunks"] == 3
    assert [c[3] for c in be.calls] == [4 * MB, 4 * MB, 2 * MB]
    assert _locked_kb() - locked0 == 10 * MB // 1024
    buf.close()
    buf.close()
    assert be.live == [] and len(be.calls) == 6
    assert _locked_kb() == locked0


@pytest.mark.parametrize("fail_at", [0, 2])
def test_registration_failure_rolls_back_earlier_chunks(fail_at, plain_tmpfs):
    be = MlockBackend(fail_at=fail_at)
    locked0 = _locked_kb()
    with pytest.raises(OSError, match="injected failure") as info:
        allocate_host(
            8 * MB, huge_pages=False, backend=be, register_chunk_bytes=2 * MB, shared_dir=plain_tmpfs
        )
    registered = [c for c in be.calls if c[0] == "register"][:fail_at]
    unregistered = [c for c in be.calls if c[0] == "unregister"]
    assert [c[1] for c in unregistered] == list(reversed(range(fail_at)))
    assert [c[2:] for c in unregistered] == [c[2:] for c in reversed(registered)]
    assert be.live == [] and _locked_kb() == locked0
    assert not _mapped(be.calls[0][2], 8 * MB)
    assert os.listdir(plain_tmpfs) == []
    assert any("rolled back" in n for n in getattr(info.value, "__notes__", []))


# -- lifetime -----------------------------------------------------------------------------


def test_views_keep_the_mapping_until_they_die():
    buf = allocate_host(4 * MB)
    view = buf.tensor[100:200]
    view.fill_(7)
    address = buf.address
    buf.close()
    assert buf.closed and buf.mapped and _mapped(address, 4 * MB)
    assert int(view.sum()) == 7 * 100  # still valid memory, not a dangling pointer
    with pytest.raises(RuntimeError, match="closed"):
        _ = buf.tensor
    with pytest.raises(RuntimeError, match="closed"):
        buf.report()
    del view
    assert not buf.mapped and not _mapped(address, 4 * MB)


def test_close_without_views_unmaps_at_once():
    buf = allocate_host(4 * MB)
    address = buf.address
    buf.close()
    assert not buf.mapped and not _mapped(address, 4 * MB)


# -- shared files -------------------------------------------------------------------------


def test_keep_name_attach_then_unlink(plain_tmpfs):
    owner = allocate_host(4 * MB, shared_dir=plain_tmpfs, keep_name=True, huge_pages=False)
    path = owner.shared_path
    name = os.path.basename(path)
    assert name.startswith(f"{shm.PREFIX}{os.getpid()}-") and len(name.rsplit("-", 1)[1]) == 32
    assert os.stat(path).st_mode & 0o777 == 0o600
    owner.tensor[:3] = torch.tensor([1, 2, 3], dtype=torch.uint8)
    peer = attach_host(path, huge_pages=False)
    assert peer.tensor[:4].tolist() == [1, 2, 3, 0]  # attaching does not clear data
    peer.tensor[3] = 9
    assert int(owner.tensor[3]) == 9
    peer.unlink()
    assert os.listdir(plain_tmpfs) == []
    assert int(peer.tensor[0]) == 1  # unlinking the name keeps mapped pages
    peer.close()
    owner.close()


def test_an_attached_file_smaller_than_a_huge_page_says_so_first(plain_tmpfs):
    with allocate_host(MB, shared_dir=plain_tmpfs, keep_name=True, huge_pages=False) as owner, \
            attach_host(owner.shared_path, huge_pages=True) as peer:
        r = peer.report()
        assert r["huge_page_collapse"] == "too small" and r["huge_page_coverage"] == 0
        assert r["warnings"][0].startswith("the range (1,048,576 bytes) is smaller than one 2 MB page"), r["warnings"]


def test_attach_refuses_a_file_others_can_read(plain_tmpfs):
    p = plain_tmpfs / f"{shm.PREFIX}loose"
    p.write_bytes(b"\0" * vm.PAGE)
    os.chmod(p, 0o644)
    with pytest.raises(ValueError, match="path: .*0600"):
        attach_host(p)


def _spawn_holder(directory) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from hal.memory.host import allocate_host
        buf = allocate_host(1 << 20, shared_dir={str(directory)!r}, keep_name=True, huge_pages=False)
        print(buf.shared_path, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return proc


@pytest.mark.slow  # runs the command or pytest in a child process
def test_files_of_a_killed_process_are_reaped_by_the_next_allocation(plain_tmpfs):
    proc = _spawn_holder(plain_tmpfs)
    try:
        path = proc.stdout.readline().strip()
        assert os.path.exists(path)
        # While its creator lives, the file is left alone.
        allocate_host(vm.PAGE, shared_dir=plain_tmpfs).close()
        assert os.listdir(plain_tmpfs) == [os.path.basename(path)]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert os.path.exists(path)  # SIGKILL: nothing ran in the child
    with allocate_host(vm.PAGE, shared_dir=plain_tmpfs):
        assert os.listdir(plain_tmpfs) == []
    assert os.listdir(plain_tmpfs) == []


def test_dead_files_of_other_users_and_symlinks_are_left_alone(tmp_path):
    # A sticky world-writable directory like /dev/shm. A name that claims a dead creator (our pid
    # with a start time that is not ours) but belongs to another uid must not block allocation
    # (unlink would raise EPERM for a non-root user) nor be removed (root could remove it).
    if os.geteuid() != 0:
        pytest.skip("needs root to chown a file to another uid")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    dead = f"{shm.PREFIX}{os.getpid()}-1-"
    foreign = shared / (dead + "a" * 32)
    foreign.write_bytes(b"x")
    os.chown(foreign, 65534, 65534)
    link = shared / (dead + "b" * 32)
    link.symlink_to(tmp_path / "target")
    mine = shared / (dead + "c" * 32)
    mine.write_bytes(b"x")
    assert shm.owner_alive(foreign.name) is False
    with allocate_host(vm.PAGE, shared_dir=shared):
        pass
    assert sorted(os.listdir(shared)) == sorted([foreign.name, link.name])  # only our own file reaped
    assert foreign.stat().st_uid == 65534


@pytest.mark.slow  # runs the command or pytest in a child process
def test_interpreter_exit_removes_kept_files(plain_tmpfs):
    code = (
        "from hal.memory.host import allocate_host\n"
        f"b = allocate_host(1 << 20, shared_dir={str(plain_tmpfs)!r}, keep_name=True, huge_pages=False)\n"
        "v = b.tensor[:10]\n"
        "print(b.shared_path)\n"
    )
    out = checked_run.run([sys.executable, "-c", code])
    assert out.stdout.strip().startswith(str(plain_tmpfs))
    assert os.listdir(plain_tmpfs) == []


# -- bad input ----------------------------------------------------------------------------


def _big_mappings() -> set[tuple[int, int]]:
    """Ranges of this process's mappings of 1 MB or more: a half-made buffer would be one."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if hi - lo >= MB:
                out.add((lo, hi))
    return out


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"nbytes": 0}, "nbytes"),
        ({"nbytes": -4096}, "nbytes"),
        ({"nbytes": 1.5}, "nbytes"),
        ({"numa": ("bind", [4095])}, "numa"),
        ({"numa": ("interleave", [])}, "numa"),
        ({"numa": ("spread", [0])}, "numa"),
        ({"numa": (["bind"], [0])}, "numa"),
        ({"numa": "bind"}, "numa"),
        ({"register_chunk_bytes": 0}, "register_chunk_bytes"),
        ({"register_chunk_bytes": -1}, "register_chunk_bytes"),
        ({"shared_dir": "/nonexistent/hicache"}, "shared_dir"),
        ({"shared_dir": "/etc/hostname"}, "shared_dir"),
        ({"keep_name": True}, "keep_name"),
        ({"keep_name": "yes"}, "keep_name"),
        ({"huge_pages": 1}, "huge_pages"),
        ({"backend": object()}, "backend"),
    ],
)
def test_bad_input_names_the_argument_and_leaves_nothing(kwargs, arg):
    kwargs = {"nbytes": 4 * MB, **kwargs}
    before = _big_mappings()
    with pytest.raises(ValueError, match=rf"^{arg}\b"):
        allocate_host(**kwargs)
    assert _big_mappings() <= before


def test_read_only_shared_dir_is_refused(tmp_path):
    with mounted_tmpfs(tmp_path / "ro", "ro,size=8M") as d:
        with pytest.raises(ValueError, match="^shared_dir: .* not writable"):
            allocate_host(MB, shared_dir=d)


@pytest.mark.parametrize("failing_trim", [0, 1])
def test_map_aligned_unmaps_everything_when_trimming_fails(monkeypatch, failing_trim):
    # munmap of the spare reservation cannot be made to fail for real here (trimming a VMA's head
    # or tail is not limited by vm.max_map_count), so the failure is injected on that one call.
    real, calls = vm._munmap, []

    def munmap(addr, length):
        calls.append((addr, length))
        if len(calls) == failing_trim + 1:
            raise OSError(12, "injected munmap failure")
        real(addr, length)

    monkeypatch.setattr(vm, "_munmap", munmap)
    length = 4 * vm.PAGE
    with pytest.raises(OSError, match="injected"):
        vm.map_aligned(length)
    base = calls[0][0]  # the first trim starts at the reservation's base
    assert not _mapped(base, length + vm.HUGE_PAGE + 2 * vm.PAGE)


def test_touch_fallback_populates_every_page():
    length = 4 * MB
    start = vm.map_aligned(length)
    try:
        assert (numa.move_pages_query([start]) < 0).all()  # nothing faulted yet
        vm.touch_pages(start, length, None, fresh=True)
        status = numa.move_pages_query(range(start, start + length, vm.PAGE))
        assert (status == 0).all()
    finally:
        vm.unmap_aligned(start, length)


def test_bench_memory_reports_both_page_sizes(capsys):
    import argparse
    import json

    from conformance.bench import memory as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--sizes", "4MiB", "--copy-size", "2MiB", "--repeat", "1", "--json"])
    assert bench.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["bytes"], r["huge_pages"]) for r in out["registration"]] == [(4 * MB, False), (4 * MB, True)]
    assert out["registration"][0]["page_table_entries"] == 4 * MB // vm.PAGE
    assert set(out["bandwidth"]) == {"4k", "thp"} and out["bandwidth_ratio_thp_over_4k"]["h2d"] > 0
    with pytest.raises(ValueError, match="^--sizes"):
        bench.run(parser.parse_args(["--sizes", "0"]))


def test_bench_memory_defaults_keep_their_binary_sizes():
    # hal.common.units reads K/M/G as powers of 1000: the defaults say MiB/GiB, so the buffers timed
    # are 64 MiB, 256 MiB and 1 GiB.
    import argparse

    from conformance.bench import memory as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    a = parser.parse_args([])
    assert bench.parse_sizes(a.sizes) == [64 * MB, 256 * MB, 1024 * MB]
    assert a.copy_size == "256MiB"
    assert bench.parse_sizes("1G,1GiB") == [10**9, 1 << 30]


def test_bench_memory_says_when_its_thp_buffer_is_not_on_huge_pages(thp_disabled_for_this_process, capsys):
    """With THP off for the process both buffers are on 4 KB pages: each ratio line says it is no
    page-size comparison and why (it read '4 KB pages take 1.0x the time of THP')."""
    import argparse
    import json

    from conformance.bench import memory as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert bench.run(parser.parse_args(["--sizes", "4MiB", "--copy-size", "2MiB", "--repeat", "1"])) == 0
    ratios = [line for line in capsys.readouterr().out.splitlines() if "x the time of THP" in line or
              line.startswith("THP / 4 KB bandwidth")]
    assert len(ratios) == 2 and all("NOT a page-size comparison" in line and "PR_SET_THP_DISABLE" in line
                                    for line in ratios), ratios
    assert bench.run(parser.parse_args(["--sizes", "4MiB", "--copy-size", "2MiB", "--repeat", "1", "--json"])) == 0
    thp = json.loads(capsys.readouterr().out)["bandwidth"]["thp"]
    assert any("PR_SET_THP_DISABLE" in w for w in thp["warnings"]), thp
