"""One host KV buffer per TP group (rank 0 creates, every rank attaches and registers), or one per rank.

The shared segment is O_EXCL, 0600, unguessably named, huge-paged before first touch and interleaved
over every node while it is faulted in and registered. Every rank agrees on success before rank 0
unlinks it, so no rank runs on a half-made pool and no file stays behind. Private pools are the
baseline: N copies, N writers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat

from hal.memory import numa
from hal.memory.host import HostBuffer, allocate_host, attach_host
from hicache_ref.tp.group import Group


@contextlib.contextmanager
def _interleaved(nodes: list[int] | None):
    """This thread's policy is MPOL_INTERLEAVE over `nodes` inside, the previous one after."""
    if nodes is None:
        yield
        return
    with numa.thread_policy(numa.MPOL_INTERLEAVE, nodes):
        yield


def _interleave_nodes(interleave: bool) -> tuple[list[int] | None, str]:
    if not interleave:
        return None, "not requested"
    try:
        nodes = numa.online_nodes()
        numa.get_mempolicy()  # the syscalls exist here
    except (numa.NumaUnsupported, OSError) as e:
        return None, f"unavailable: {e}"
    return nodes, f"interleave over nodes {nodes}"


def _fault(faults: dict, name: str, rank: int) -> None:
    """Test hooks: make this rank fail ("fail_attach_rank") or die ("kill_in_setup_rank") here."""
    if faults.get(f"fail_{name}_rank") == rank:
        raise ValueError(f"injected failure at {name}")
    if faults.get(f"kill_in_{name}_rank") == rank:
        os.kill(os.getpid(), signal.SIGKILL)


def open_host_buffer(group: Group, nbytes: int, *, shared: bool, shared_dir=None, backend=None,
                     interleave: bool = True, faults: dict | None = None) -> tuple[HostBuffer, dict]:
    """This rank's host KV buffer of `nbytes` and facts about it (see the module docstring)."""
    faults = faults or {}
    nodes, numa_note = _interleave_nodes(interleave)
    if not shared:
        buf, error = None, None
        try:
            buf = allocate_host(nbytes, backend=backend)
        except (ValueError, OSError) as e:
            error = str(e)
        try:
            group.agree(error, "private host pool allocation")
        except BaseException:
            if buf is not None:
                buf.close()
            raise
        return buf, {"shared": False, "nbytes": buf.nbytes, "numa": "default"}
    if shared_dir is None:
        raise ValueError("shared_dir: a shared host pool needs a directory for its file (e.g. /dev/shm)")
    buf = error = None
    info: dict = {"shared": True, "numa": numa_note}
    if group.rank == 0:
        try:
            before = numa.get_mempolicy() if nodes is not None else None
            with _interleaved(nodes):
                buf = allocate_host(nbytes, shared_dir=shared_dir, keep_name=True, backend=backend,
                                    numa=None if nodes is None else ("interleave", nodes))
            if nodes is not None:
                info["policy_restored"] = numa.get_mempolicy() == before
                info["policy_achieved"] = buf.report()["policy_achieved"]
            st = os.stat(buf.shared_path)
            info["file_mode"] = f"{stat.S_IMODE(st.st_mode):04o}"
            info["file_uid"] = st.st_uid
        except (ValueError, OSError) as e:
            error = f"create: {e}"
    try:
        path, error0 = group.broadcast_object((None if buf is None else buf.shared_path, error))
        if error0:
            raise ValueError(f"shared host pool setup failed: rank 0: {error0}")
        if group.rank != 0:
            try:
                _fault(faults, "attach", group.rank)
                with _interleaved(nodes):  # registration pins under the same policy as rank 0's
                    buf = attach_host(path, backend=backend)
                if buf.nbytes < nbytes:
                    raise ValueError(f"path: {path} has {buf.nbytes} bytes, {nbytes} needed")
            except (ValueError, OSError) as e:
                error = f"attach: {e}"
        _fault(faults, "setup", group.rank)
        group.agree(error, "shared host pool attach")
    except BaseException:
        if buf is not None:
            buf.close()  # rank 0's close also removes the file
        raise
    finally:
        if group.rank == 0 and buf is not None:
            buf.unlink()  # every rank has mapped it, or the setup failed: no name left either way
    info["nbytes"] = buf.nbytes
    return buf, info
