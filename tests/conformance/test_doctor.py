"""`hicache doctor`: check order and fields, JSON, exit codes, p800 emulation, synthetic hosts (IDO, THP, /dev/shm), bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.doctor.checks import parse_bytes, run_doctor
from conformance.doctor.doctor_report import DoctorReport
from conformance.doctor.huge_pages import check_page_table_entries
from conformance.doctor.pinned_memory import REGISTERED_WARN_BYTES, check_memlock, check_registered_size
from conformance.doctor.records import STATUSES, Check, HostPaths
from hal.memory import shm, vm
from hal.topology import GIB, from_profile
from tests.hal.test_topology import build_p800_box

ORDER = [
    "pcie_ordering", "numa_placement", "thp_anon", "thp_shmem", "page_table_entries", "host_memory",
    "memlock", "registered_size", "binding_policy", "host_pool_size", "write_policy",
]


def our_shared_files() -> set[str]:
    """Shared-buffer files of this process (hal.memory.shm names carry the pid), on disk or still mapped."""
    mine = f"hicache-kv-{os.getpid()}-"
    with open("/proc/self/maps") as f:
        mapped = {line.split()[-1] for line in f if mine in line}
    return {n for n in os.listdir("/dev/shm") if n.startswith(mine)} | mapped


def doctor_json(capsys, *args) -> tuple[int, dict]:
    rc = main(["doctor", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def by_name(out: dict) -> dict[str, dict]:
    return {c["name"]: c for c in out["checks"]}


def test_default_run_lists_every_check_in_order_with_its_fields(capsys):
    rc, out = doctor_json(capsys)
    assert rc == 0
    assert out["backend"] == "emu" and out["profile"] is None
    assert [c["name"] for c in out["checks"]] == ORDER
    for c in out["checks"]:
        assert set(c) == {"name", "status", "value", "fix"}
        assert c["status"] in STATUSES and c["value"]
        if c["status"] != "ok":
            assert c["fix"], c
    assert out["topology"]["source"] == "sysfs"


def test_thp_checks_report_what_this_host_has(capsys):
    _, out = doctor_json(capsys)
    checks = by_name(out)
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        mode = f.read().split("[")[1].split("]")[0]
    assert f"enabled={mode}" in checks["thp_anon"]["value"]
    assert checks["thp_anon"]["status"] == ("warn" if mode == "never" else "ok")
    assert "/dev/shm" in checks["thp_shmem"]["value"]
    if checks["thp_shmem"]["status"] != "ok":
        assert "huge=" in checks["thp_shmem"]["fix"] or "shmem_enabled" in checks["thp_shmem"]["fix"] \
            or "compact" in checks["thp_shmem"]["fix"] or "advise" in checks["thp_shmem"]["fix"]


@pytest.mark.slow
def test_p800_profile_is_emulated_with_shared_uplinks_and_local_capacity(capsys):
    rc, out = doctor_json(capsys, "--profile", "p800")
    assert rc == 0
    assert out["profile"] == "p800" and out["topology"]["source"] == "profile"
    assert out["topology"]["numa_nodes"] == 8 and out["topology"]["devices"] == 8
    checks = by_name(out)
    assert checks["pcie_ordering"]["status"] == "unknown"  # the profile's IDO is unknown
    assert "4 shared uplink(s)" in checks["pcie_ordering"]["value"]
    assert "setpci" in checks["pcie_ordering"]["fix"]
    assert "74.8 GiB/card" in checks["binding_policy"]["value"] and checks["binding_policy"]["status"] == "ok"
    assert out["pool_source"] == "planned local capacity per card"
    assert checks["registered_size"]["status"] == "warn"  # 74.8 GiB registered; the seed saw 80 GB hurt
    assert checks["write_policy"]["fix"].endswith("write_through_selective")


def test_pool_too_big_for_local_binding_warns_and_too_big_for_the_host_fails(capsys):
    rc, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "100GiB")
    assert rc == 0 and by_name(out)["binding_policy"]["status"] == "warn"
    rc, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "2T")
    assert rc == 1 and by_name(out)["binding_policy"]["status"] == "fail"
    assert out["pool_bytes"] == 2 * 10**12


def test_a_pool_only_a_tp_shared_copy_holds_is_advised_as_shared(capsys):
    # p800: 8 x 187 GiB, 80% usable: ~150 GiB/card interleaved, ~1197 GiB as one shared pool
    rc, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "500GiB")
    check = by_name(out)["binding_policy"]
    assert rc == 0 and check["status"] == "warn" and "fits only as one TP-shared pool" in check["value"]
    assert "one TP-shared pool: 1196.8 GiB seen whole by every card" in check["value"]
    assert check["fix"].startswith("share one interleaved host pool across the TP group")


def test_small_pool_registers_without_warning(capsys):
    _, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "15G")
    assert by_name(out)["registered_size"]["status"] == "ok"


def test_text_output_is_a_table_with_fixes(capsys):
    assert main(["doctor", "--profile", "p800"]) == 0
    text = capsys.readouterr().out
    assert "CHECK" in text and "STATUS" in text
    for name in ORDER:
        assert name in text
    assert "fix: " in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pool-bytes", "0"], "--pool-bytes"),
        (["--pool-bytes", "-5"], "--pool-bytes"),
        (["--pool-bytes", "lots"], "--pool-bytes"),
        (["--profile", "no-such-profile"], "--profile"),
        (["--backend", "no-such-backend"], "--backend"),
    ],
)
def test_bad_input_exits_2_naming_the_argument_and_leaves_nothing_behind(capsys, args, message):
    assert main(["doctor", *args]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert our_shared_files() == set()


def test_profile_without_topology_runs_the_host_checks_and_says_the_rest_is_unknown(capsys):
    rc, out = doctor_json(capsys, "--profile", "p900")
    assert rc == 0 and [c["name"] for c in out["checks"]] == ORDER
    checks = by_name(out)
    for name in ("pcie_ordering", "binding_policy"):
        assert checks[name]["status"] == "unknown" and "p900 has no topology" in checks[name]["value"]
    assert checks["thp_anon"]["status"] in ("ok", "warn")  # ran on this host
    assert out["pool_source"] == "default"


def test_unknown_host_memory_stays_unknown_in_the_advice(capsys):
    # h200.yaml gives no host memory: this machine's must not stand in for the H200 server's.
    _, out = doctor_json(capsys, "--backend", "cuda", "--profile", "h200")
    checks = by_name(out)
    assert checks["binding_policy"]["status"] == "unknown" and "no host memory" in checks["binding_policy"]["value"]
    assert "--pool-bytes <=" not in checks["binding_policy"]["fix"]
    assert checks["pcie_ordering"]["status"] == "unknown"  # devices_per_switch unknown: sharing unknown, not "ok"
    assert out["pool_source"] == "default"


def test_pool_size_advice_says_smaller_when_l2_is_smaller():
    from conformance.doctor.advice import advise_pool_size
    from hardware_profiles import load_profile

    h200 = load_profile("h200")  # 140.4 GiB HBM
    small = advise_pool_size(h200, 14 * GIB)
    assert small.status == "warn" and "smaller than L1" in small.value and "barely" not in small.value
    near = advise_pool_size(h200, 200 * GIB)
    assert near.status == "warn" and "barely larger" in near.value
    assert advise_pool_size(h200, 400 * GIB).status == "ok"


def test_a_pool_under_1_gb_is_not_advised_as_hicache_size_0(capsys):
    _, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "1")
    check = by_name(out)["host_pool_size"]
    assert check["status"] == "warn" and "--hicache-size 0" not in check["value"] + check["fix"]
    assert "under 1 GB" in check["value"]


def test_checks_and_advice_do_not_import_each_other():
    import ast
    import inspect

    import conformance.doctor.advice as advice

    tree = ast.parse(inspect.getsource(advice))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    checks = {f"conformance.doctor.{m}" for m in
              ("checks", "topology_checks", "huge_pages", "host_memory", "pinned_memory", "stack_preflight")}
    assert not imported & checks


def test_a_run_leaves_no_shared_files(capsys):
    from hal.memory.host import allocate_host

    probe = allocate_host(2 << 20, shared_dir="/dev/shm")  # the check itself can see a live one
    assert our_shared_files()
    probe.close()
    assert our_shared_files() == set()
    doctor_json(capsys, "--profile", "p800")
    assert our_shared_files() == set()


def fake_host(tmp_path, *, odd_ido=None, thp="always madvise [never]", shmem="always within_size advise [never] deny force",
              shm_opts="rw,nosuid,nodev", capeff="0000000000000000", thp_process=1) -> HostPaths:
    """A synthetic host: the 8-node P800 box from test_topology plus THP files, mounts, status."""
    sys_root = build_p800_box(tmp_path / "sys", odd_ido=odd_ido).root
    thp_dir = sys_root / "kernel/mm/transparent_hugepage"
    thp_dir.mkdir(parents=True)
    (thp_dir / "enabled").write_text(thp + "\n")
    (thp_dir / "shmem_enabled").write_text(shmem + "\n")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "mounts").write_text(f"proc /proc proc rw 0 0\ntmpfs /dev/shm tmpfs {shm_opts} 0 0\n")
    (proc / "self/status").write_text(f"Name:\tpython\nCapEff:\t{capeff}\nTHP_enabled:\t{thp_process}\n")
    return HostPaths(sys_root=str(sys_root), proc_root=str(proc))


def test_synthetic_box_with_ido_on_passes_pcie_ordering(tmp_path):
    report = run_doctor(paths=fake_host(tmp_path))
    checks = {c.name: c for c in report.checks}
    assert report.topology.source == "sysfs" and len(report.topology.devices) == 8
    assert checks["pcie_ordering"].status == "ok" and "IDO on" in checks["pcie_ordering"].value
    assert checks["write_policy"].status == "ok"


def test_synthetic_box_with_ido_off_warns(tmp_path):
    report = run_doctor(paths=fake_host(tmp_path, odd_ido=(False, False)))
    checks = {c.name: c for c in report.checks}
    assert checks["pcie_ordering"].status == "warn"
    assert "0000:12:00.0+0000:13:00.0 IDO off" in checks["pcie_ordering"].value
    assert checks["write_policy"].status == "warn"


def test_thp_never_and_shm_without_huge_warn_with_the_fix(tmp_path):
    report = run_doctor(pool_bytes=64 * GIB, paths=fake_host(tmp_path))
    checks = {c.name: c for c in report.checks}
    assert checks["thp_anon"].status == "warn" and "enabled" in checks["thp_anon"].fix
    assert checks["thp_shmem"].status == "warn"
    assert checks["thp_shmem"].fix.startswith("mount -o remount,huge=advise /dev/shm")
    assert checks["page_table_entries"].status == "warn"  # never -> 4 KB pages assumed


def test_shm_mounted_huge_advise_and_thp_madvise_pass(tmp_path):
    paths = fake_host(tmp_path, thp="always [madvise] never", shm_opts="rw,nosuid,nodev,huge=advise")
    checks = {c.name: c for c in run_doctor(pool_bytes=64 * GIB, paths=paths).checks}
    assert checks["thp_anon"].status == "ok"
    assert checks["thp_shmem"].status == "ok" and "huge=advise" in checks["thp_shmem"].value
    assert checks["page_table_entries"].status == "ok"


def test_shmem_deny_overrides_the_mount(tmp_path):
    paths = fake_host(tmp_path, shmem="always within_size advise never [deny] force", shm_opts="rw,huge=always")
    check = next(c for c in run_doctor(paths=paths).checks if c.name == "thp_shmem")
    assert check.status == "warn" and "shmem_enabled" in check.fix


def test_thp_never_is_reported_with_the_reason_allocate_host_gives(tmp_path):
    paths = fake_host(tmp_path)
    enabled = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/enabled")
    check = next(c for c in run_doctor(paths=paths).checks if c.name == "thp_anon")
    assert check.status == "warn" and vm.thp_disabled_reason(False, enabled) in check.value


def test_thp_off_for_the_process_is_named_by_both_thp_checks_not_sysfs_or_the_mount(tmp_path):
    """A launcher's prctl(PR_SET_THP_DISABLE) gives every pool 4 KB pages whatever sysfs and the
    mount say: both checks warn with that reason and the fix for it (they said ok, or blamed the mount)."""
    paths = fake_host(tmp_path, thp="always [madvise] never", shm_opts="rw,huge=advise", thp_process=0)
    checks = {c.name: c for c in run_doctor(paths=paths).checks}
    for name in ("thp_anon", "thp_shmem"):
        assert checks[name].status == "warn", checks[name]
        assert "PR_SET_THP_DISABLE" in checks[name].value and "PR_SET_THP_DISABLE" in checks[name].fix
        assert "remount" not in checks[name].fix and "echo" not in checks[name].fix


def test_thp_files_that_read_but_say_nothing_and_an_explicit_huge_deny_are_named_as_they_are(tmp_path):
    """An `enabled` file with no bracketed mode was called unreadable; a tmpfs mounted huge=deny
    was said to be mounted without huge=."""
    paths = fake_host(tmp_path / "a", thp="always madvise never", shm_opts="rw,huge=deny")
    checks = {c.name: c for c in run_doctor(paths=paths).checks}
    assert checks["thp_anon"].status == "unknown", checks["thp_anon"]
    assert "selects no mode in brackets" in checks["thp_anon"].value and "unreadable" not in checks["thp_anon"].value
    assert "mounted with huge=deny" in checks["thp_shmem"].value, checks["thp_shmem"]
    (Path(paths.sys_root) / "kernel/mm/transparent_hugepage/enabled").unlink()
    assert "unreadable" in {c.name: c for c in run_doctor(paths=paths).checks}["thp_anon"].value


def test_shm_dir_behind_a_symlink_is_found_under_its_escaped_mount_point(tmp_path):
    # /dev/shm may be a symlink (to /run/shm); /proc/mounts writes a space in a mount point as \040.
    real = tmp_path / "run shm"
    real.mkdir()
    link = tmp_path / "shm-link"
    link.symlink_to(real)
    paths = fake_host(tmp_path, thp="always [madvise] never")
    mount_point = str(real).replace(" ", "\\040")
    with open(os.path.join(paths.proc_root, "mounts"), "a") as f:
        f.write(f"tmpfs {mount_point} tmpfs rw,nosuid,huge=advise 0 0\n")
    paths = HostPaths(sys_root=paths.sys_root, proc_root=paths.proc_root, shm_dir=str(link))
    check = next(c for c in run_doctor(paths=paths).checks if c.name == "thp_shmem")
    assert check.status == "ok", check
    assert f"tmpfs at {real} huge=advise" in check.value
    # ... and it is the verdict allocate_host(shared_dir=...) goes by.
    sysfs_shmem = os.path.join(paths.sys_root, "kernel/mm/transparent_hugepage/shmem_enabled")
    hp = shm.shared_huge_pages(str(link), mounts=os.path.join(paths.proc_root, "mounts"),
                               shmem_enabled_path=sysfs_shmem)
    assert (hp.mount_point, hp.fstype, hp.huge, hp.warning) == (str(real), "tmpfs", "advise", None)


def test_memlock_without_ipc_lock_fails_below_the_pool(tmp_path):
    assert check_memlock(80 * GIB, 8 << 20, ipc_lock=False).status == "fail"
    assert check_memlock(80 * GIB, 8 << 20, ipc_lock=True).status == "ok"
    assert check_memlock(80 * GIB, None, ipc_lock=False).status == "ok"
    assert check_memlock(80 * GIB, 100 * GIB, ipc_lock=None).status == "ok"
    failing = check_memlock(80 * GIB, 8 << 20, ipc_lock=False)
    report = DoctorReport("emu", None, from_profile("p800"), 80 * GIB, "test", [Check("x", "ok", "v", ""), failing])
    assert report.exit_code() == 1 and "ulimit -l" in failing.fix


def test_page_table_entries_at_4k_vs_2m():
    # hardware_profiles/p800.yaml: 100 GiB takes ~26M PTEs at 4 KiB, ~51K at 2 MiB.
    c = check_page_table_entries(100 * GIB, coverage=0.0, thp_mode="madvise")
    assert "26,214,400 PTEs at 4 KB" in c.value and "51,200 at 2 MB" in c.value
    assert c.status == "warn"
    assert check_page_table_entries(100 * GIB, coverage=1.0, thp_mode="never").status == "ok"
    assert check_page_table_entries(100 << 20, coverage=0.0, thp_mode="never").status == "ok"  # small pool


@pytest.mark.parametrize(
    "text, n",
    [("1024", 1024), ("80G", 80 * 10**9), ("80GB", 80 * 10**9), ("75GiB", 75 * GIB), ("1.5T", 1500 * 10**9),
     ("4 MiB", 4 << 20)],
)
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "12XB", "", "G"])
def test_parse_bytes_rejects_naming_the_argument(text):
    with pytest.raises(ValueError, match="--pool-bytes"):
        parse_bytes(text)


def test_run_doctor_rejects_bad_pool_before_doing_anything():
    with pytest.raises(ValueError, match="--pool-bytes"):
        run_doctor(pool_bytes=0)
    with pytest.raises(ValueError, match="--pool-bytes"):
        run_doctor(pool_bytes=True)


def test_device_without_firmware_numa_affinity_warns(tmp_path):
    paths = fake_host(tmp_path)
    node_file = os.path.join(paths.sys_root, "bus/pci/devices/0000:12:00.0/numa_node")
    with open(node_file, "w") as f:
        f.write("-1\n")
    check = next(c for c in run_doctor(paths=paths).checks if c.name == "numa_placement")
    assert check.status == "warn" and "0000:12:00.0" in check.value and "numa_node" in check.fix


def _with_meminfo(paths: HostPaths, total_gib: int, avail_gib: int) -> HostPaths:
    kib = 1024 * 1024
    (Path(paths.proc_root) / "meminfo").write_text(
        f"MemTotal:       {total_gib * kib} kB\nMemFree:        1 kB\nMemAvailable:   {avail_gib * kib} kB\n")
    return paths


@pytest.mark.parametrize("pool_gib, status, said", [
    (16, "ok", "8 pool(s) of 16.0 GiB = 128.0 GiB; MemTotal 512.0 GiB, MemAvailable 400.0 GiB"),
    # 2 cards per node x 40 GiB = 80 GiB > a node's 64 GiB: fits the host, not each card's own node
    (40, "warn", "node 0: 2 local pool(s) = 80.0 GiB > its 64.0 GiB"),
    (60, "warn", "480.0 GiB; MemTotal 512.0 GiB, MemAvailable 400.0 GiB -> more than is available now"),
    (80, "fail", "640.0 GiB; MemTotal 512.0 GiB, MemAvailable 400.0 GiB -> more than this host's memory"),
])
def test_pools_are_checked_against_host_and_node_memory(tmp_path, pool_gib, status, said):
    # the synthetic box: 8 cards, 2 on each of nodes 0, 2, 4, 6, 8 nodes of 64 GiB
    paths = _with_meminfo(fake_host(tmp_path), 512, 400)
    report = run_doctor(pool_bytes=pool_gib * GIB, paths=paths)
    check = {c.name: c for c in report.checks}["host_memory"]
    assert check.status == status and said in check.value, check
    if status != "ok":
        assert check.fix.endswith("--pool-bytes <= 50.0 GiB (MemAvailable / 8 cards)")  # 400 GiB / 8
    if status == "fail":
        assert report.exit_code() == 1


def test_pools_past_the_cgroups_room_fail_naming_the_limit(tmp_path):
    """In a container of 40 GiB on a 512 GiB host, 8 pools of 10 GiB fit MemAvailable but not the
    cgroup's limit: fail naming the room and how to fit (it said ok; the pre-fault is OOM-killed)."""
    paths = _with_meminfo(fake_host(tmp_path), 512, 400)
    (Path(paths.proc_root) / "self/cgroup").write_text("4:memory:/job\n0::/\n")
    job = Path(paths.sys_root) / "fs/cgroup/memory/job"
    job.mkdir(parents=True)
    (job / "memory.limit_in_bytes").write_text(f"{40 * GIB}\n")
    (job / "memory.usage_in_bytes").write_text(f"{8 * GIB}\n")
    report = run_doctor(pool_bytes=10 * GIB, paths=paths)
    check = {c.name: c for c in report.checks}["host_memory"]
    assert check.status == "fail" and "cgroup memory limit 32.0 GiB" in check.value, check
    assert check.fix.startswith("--pool-bytes <= 4.0 GiB (the cgroup's room / 8 cards)"), check.fix
    assert report.exit_code() == 1
    report = run_doctor(pool_bytes=3 * GIB, paths=paths)
    assert {c.name: c for c in report.checks}["host_memory"].status == "ok"


@pytest.mark.slow  # doctor in a child process in a child memory cgroup (root only)
def test_doctor_in_a_real_tight_cgroup_fails_a_pool_past_its_limit():
    import subprocess
    import sys

    from tests.cgroups import memory_limited

    with memory_limited(1536 << 20) as prefix:
        proc = subprocess.run([*prefix, sys.executable, "-m", "conformance.cli.main", "doctor", "--json",
                               "--pool-bytes", "4GiB"], capture_output=True, text=True, timeout=300)
    check = by_name(json.loads(proc.stdout))["host_memory"]
    assert proc.returncode == 1 and check["status"] == "fail" and "cgroup memory limit" in check["value"], check


def test_a_pool_larger_than_this_host_fails_naming_pool_bytes(capsys):
    total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    rc, out = doctor_json(capsys, "--pool-bytes", str(2 * total))  # twice this host's memory
    check = by_name(out)["host_memory"]
    assert rc == 1 and check["status"] == "fail" and "more than this host's memory" in check["value"]
    assert check["fix"].startswith("--pool-bytes <= ")
    rc, out = doctor_json(capsys, "--pool-bytes", str(total // 1000))  # a thousandth: fits
    assert by_name(out)["host_memory"]["status"] == "ok"


def test_an_emulated_box_leaves_host_memory_to_binding_policy(capsys):
    _, out = doctor_json(capsys, "--profile", "p800", "--pool-bytes", "10T")
    checks = by_name(out)
    assert checks["host_memory"]["status"] == "unknown" and "binding_policy" in checks["host_memory"]["value"]
    assert checks["binding_policy"]["status"] == "fail"


def test_registered_size_warns_only_above_the_bound():
    assert check_registered_size(None, REGISTERED_WARN_BYTES).status == "ok"  # exactly the bound: ok
    assert check_registered_size(None, REGISTERED_WARN_BYTES + 1).status == "warn"
    assert check_registered_size(None, 15 * GIB).status == "ok"  # the seed's 15 GB (+8.8%)
