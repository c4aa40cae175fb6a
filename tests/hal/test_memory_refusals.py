"""allocate_host / attach_host refusals: sizes no host can hold are ValueErrors naming nbytes
before any mmap, and every refusal, wherever it happens, leaves no file, mapping, fd or pin."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch

from hal.backend import Backend
from hal.memory import host, shm, vm
from hal.memory.host import allocate_host, attach_host

MB = 1 << 20


class _Tracked:
    """Wraps host.map_aligned / unmap_aligned to see what was mapped and whether it went back."""

    def __init__(self, monkeypatch):
        self.mapped, self.unmapped = [], []
        real_map, real_unmap = host.map_aligned, host.unmap_aligned

        def map_aligned(length, fd=None):
            address = real_map(length, fd)
            self.mapped.append((address, length))
            return address

        def unmap_aligned(address, length):
            self.unmapped.append((address, length))
            real_unmap(address, length)

        monkeypatch.setattr(host, "map_aligned", map_aligned)
        monkeypatch.setattr(host, "unmap_aligned", unmap_aligned)

    def all_given_back(self) -> bool:
        return sorted(self.mapped) == sorted(self.unmapped) and not any(_mapped(a, n) for a, n in self.mapped)


def _mapped(start: int, length: int) -> bool:
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo < start + length and start < hi:
                return True
    return False


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _our_shm_files(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(f"{shm.PREFIX}{os.getpid()}-")]


class _PinBackend(Backend):
    """Registers by mlock; fails on chunk `fail_at` (None: never)."""

    name = "pin-test"

    def __init__(self, fail_at=None):
        super().__init__(None)
        self.fail_at, self.live, self.count = fail_at, [], 0
        self._libc = ctypes.CDLL(None, use_errno=True)

    @classmethod
    def probe(cls):
        return True, ""

    def _register_range(self, address, nbytes):
        self.count += 1
        if self.count - 1 == self.fail_at:
            raise OSError("injected registration failure")
        self._libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(nbytes))
        self.live.append((address, nbytes))
        return address, nbytes

    def _unregister_range(self, handle):
        self._libc.munlock(ctypes.c_void_p(handle[0]), ctypes.c_size_t(handle[1]))
        self.live.remove(handle)

    def alloc_device(self, shape, dtype):
        raise NotImplementedError

    def new_stream(self):
        raise NotImplementedError

    def default_stream(self):
        raise NotImplementedError

    def _execute(self, plan, stream):
        raise NotImplementedError


def _no_mmap(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("mmap was called for a size that had to be refused first")

    monkeypatch.setattr(vm, "_mmap", refuse)


@pytest.mark.parametrize("nbytes", [2**64, 2**63 - 1, vm.ADDRESS_SPACE_BYTES, "memory+swap"])
@pytest.mark.parametrize("huge_pages", [True, False])
def test_sizes_no_host_can_map_are_value_errors_naming_nbytes(monkeypatch, tmp_path, nbytes, huge_pages):
    total = vm.memory_and_swap_bytes()
    if nbytes == "memory+swap":
        if total is None:
            pytest.skip("/proc/meminfo does not say how much memory this host has")
        nbytes = total + vm.PAGE
    _no_mmap(monkeypatch)
    for shared_dir in (None, tmp_path):
        with pytest.raises(ValueError, match=rf"^nbytes: {nbytes} bytes .*exceeds"):
            allocate_host(nbytes, huge_pages=huge_pages, shared_dir=shared_dir)
    assert os.listdir(tmp_path) == []


def test_map_size_problem_reads_memory_and_swap(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        1000 kB\nMemFree:  10 kB\nSwapTotal:        24 kB\n")
    assert vm.memory_and_swap_bytes(str(meminfo)) == 1024 * 1024
    assert vm.map_size_problem(1024 * 1024, str(meminfo)) is None
    assert "memory and swap (1048576 bytes" in vm.map_size_problem(1024 * 1024 + 1, str(meminfo))
    # Unreadable meminfo: only the address space bounds a size.
    assert vm.map_size_problem(1 << 40, str(tmp_path / "missing")) is None
    assert "address space" in vm.map_size_problem(vm.ADDRESS_SPACE_BYTES, str(tmp_path / "missing"))


def _boom(*args, **kwargs):
    raise OSError("injected failure")


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


# (what fails, how to make it fail, the exception allocate_host raises)
FAILURES = {
    "bad-argument": (None, ValueError),
    "create-file": (("os.ftruncate", _boom), OSError),
    "map": (("host.map_aligned", _boom), OSError),
    "madvise": (("host.madvise_huge", _boom), OSError),
    "prefault": (("host.populate", _boom), OSError),
    "prefault-interrupted": (("host.populate", _interrupt), KeyboardInterrupt),
    "register": ("register", OSError),
    "tensor": (("torch.frombuffer", _boom), OSError),
}


def _inject(monkeypatch, how):
    if how is None or how == "register":
        return
    target, fn = how
    owner, name = target.split(".")
    monkeypatch.setattr({"os": os, "host": host, "torch": torch}[owner], name, fn)


def _shared_dirs(tmp_path):
    dirs = [str(tmp_path)]
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        dirs.append("/dev/shm")
    return dirs


@pytest.mark.parametrize("failure", list(FAILURES))
@pytest.mark.parametrize("shared", [False, True], ids=["anonymous", "shared"])
def test_allocate_host_leaves_nothing_behind_on_any_refusal(monkeypatch, tmp_path, failure, shared):
    how, error = FAILURES[failure]
    for shared_dir in _shared_dirs(tmp_path) if shared else [None]:
        if failure == "create-file" and not shared:
            continue
        tracked = _Tracked(monkeypatch)
        _inject(monkeypatch, how)
        backend = _PinBackend(fail_at=1 if how == "register" else None)
        fds = _fds()
        kwargs = dict(huge_pages=False, backend=backend, register_chunk_bytes=MB, shared_dir=shared_dir,
                      keep_name=shared_dir is not None)
        if how is None:
            kwargs["numa"] = ("spread", [0])
        with pytest.raises(error):
            allocate_host(4 * MB, **kwargs)
        monkeypatch.undo()
        assert tracked.all_given_back(), f"{failure}: a mapping was left: {tracked.mapped} vs {tracked.unmapped}"
        assert backend.live == [], f"{failure}: pinned ranges left"
        assert _fds() <= fds, f"{failure}: file descriptors left open"
        if shared_dir is not None:
            assert _our_shm_files(shared_dir) == [], f"{failure}: a file was left in {shared_dir}"


ATTACH_FAILURES = {
    "bad-huge-pages": ({"huge_pages": 1}, None, ValueError),
    "bad-path": ({"path": 3}, None, ValueError),
    "bad-chunk": ({"register_chunk_bytes": 0}, None, ValueError),
    "map": ({}, ("host.map_aligned", _boom), OSError),
    "prefault": ({}, ("host.populate", _boom), OSError),
    "prefault-interrupted": ({}, ("host.populate", _interrupt), KeyboardInterrupt),
    "register": ({}, "register", OSError),
    "tensor": ({}, ("torch.frombuffer", _boom), OSError),
}


@pytest.mark.parametrize("failure", list(ATTACH_FAILURES))
def test_attach_host_leaves_nothing_behind_on_any_refusal(monkeypatch, tmp_path, failure):
    kwargs, how, error = ATTACH_FAILURES[failure]
    owner = allocate_host(4 * MB, shared_dir=tmp_path, keep_name=True, huge_pages=False)
    try:
        owner.tensor[:8] = 7
        tracked = _Tracked(monkeypatch)
        _inject(monkeypatch, how)
        backend = _PinBackend(fail_at=1 if how == "register" else None)
        fds = _fds()
        args = {"path": owner.shared_path, "huge_pages": False, "backend": backend,
                "register_chunk_bytes": MB, **kwargs}
        with pytest.raises(error):
            attach_host(**args)
        monkeypatch.undo()
        assert tracked.all_given_back() and backend.live == [] and _fds() <= fds
        # The creator's file and bytes are untouched: a refused attach is no unlink.
        assert os.path.exists(owner.shared_path) and (owner.tensor[:8] == 7).all()
        with attach_host(owner.shared_path, huge_pages=False) as again:
            assert (again.tensor[:8] == 7).all()
    finally:
        owner.close()
    assert os.listdir(tmp_path) == []


def test_attach_host_refuses_a_file_no_host_could_map(monkeypatch, tmp_path):
    owner = allocate_host(4 * MB, shared_dir=tmp_path, keep_name=True, huge_pages=False)
    try:
        monkeypatch.setattr(vm, "ADDRESS_SPACE_BYTES", 2 * MB)
        _no_mmap(monkeypatch)
        with pytest.raises(ValueError, match=r"^path: .* has 4194304 bytes, which exceeds"):
            attach_host(owner.shared_path, huge_pages=False)
    finally:
        monkeypatch.undo()
        owner.close()
