"""Trace replay: exact hit counts on hand-made traces, capacities, L2 hits, CLI figures, real-trace slices."""

import contextlib
import gzip
import io
import json
import threading
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest

from conformance.cli.main import main as cli_main
from hal.backend import get_backend
from hicache_ref.sim.run import serial_replay as replay_module
from hicache_ref.sim.run.serial_replay import JSON_KEYS, inline_transfers, replay
from hicache_ref.sim.trace.reader import TraceRequest, find_trace, packaged_traces, read_trace, request_tokens
from hicache_ref.spec import CacheSpec
from tests import checked_run

SMALL = dict(layers=2, kv_dim=8)  # geometry only sets bytes; hit counts do not depend on it


def _replay(trace, limit=None, **spec):
    return replay(CacheSpec.of(**spec), trace, limit)


def _req(ids, n):
    return TraceRequest(0.0, n, 1, tuple(ids))


def _write_trace(path: Path, reqs) -> Path:
    with path.open("w") as f:
        for i, r in enumerate(reqs):
            f.write(json.dumps({"timestamp": i, "input_length": r.input_length, "output_length": 1,
                                "hash_ids": list(r.hash_ids)}) + "\n")
    return path


@pytest.fixture(scope="module")
def conversation():
    path = find_trace("conversation_trace.jsonl")
    assert path is not None, "the packaged conversation trace is missing"
    return path


# -- trace reading -------------------------------------------------------------------------------

def test_request_tokens_expand_each_hash_id_to_512_tokens_and_cut():
    t = request_tokens([7, 3], 700)
    assert t.dtype == np.uint32 and len(t) == 700
    assert t[0] == 7 * 512 and t[511] == 7 * 512 + 511 and t[512] == 3 * 512 and t[-1] == 3 * 512 + 187


def test_read_trace_refuses_bad_lines_naming_file_line_and_key(tmp_path):
    good = {"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, "hash_ids": [1]}) + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl: line 2: hash_ids: expected ceil"):
        read_trace(p)
    assert len(read_trace(p, limit=1)) == 1
    p.write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1: not JSON"):
        read_trace(p)
    p.write_text(json.dumps({**good, "input_length": -1}) + "\n")
    with pytest.raises(ValueError, match="input_length"):
        read_trace(p)


def test_the_largest_hash_id_is_the_one_whose_tokens_end_at_2_to_the_32_minus_1(tmp_path):
    top = 2**32 // 512 - 1  # 8388607: tokens 2**32 - 512 .. 2**32 - 1
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"timestamp": 0, "input_length": 512, "hash_ids": [top]}) + "\n")
    (r,) = read_trace(p)
    t = request_tokens(r.hash_ids, r.input_length)
    assert int(t[0]) == 2**32 - 512 and int(t[-1]) == 2**32 - 1
    p.write_text(json.dumps({"timestamp": 0, "input_length": 512, "hash_ids": [top + 1]}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: hash_ids: expected ids in \[0, 8388607\]"):
        read_trace(p)


# -- exact counts on hand-made traces ---------------------------------------------------------------

A, B_SHARES_TWO, A_AGAIN, B_CUT = _req([1, 2, 3], 1536), _req([1, 2, 9], 1500), _req([1, 2, 3], 1536), _req([1, 2, 9], 1400)


def test_shared_blocks_hit_exactly_and_partial_pages_never_do():
    fig = _replay([A, B_SHARES_TWO, A_AGAIN, B_CUT], **SMALL)
    # B shares 2 of A's blocks (1024); A again hits all 1536; B cut to 1400 hits its 21 full pages
    # of B's 23 cached pages (1472 = 1500 rounded down to pages; the partial page is never cached).
    assert fig["l1_hit_tokens"] == 1024 + 1536 + 1344
    assert fig["l2_hit_tokens"] == 0
    assert fig["input_tokens"] == 1536 + 1500 + 1536 + 1400 and fig["requests"] == 4
    assert fig["hit_rate"] == (1024 + 1536 + 1344) / fig["input_tokens"]


def test_unlimited_write_through_backs_up_every_new_page_once():
    fig = _replay([A, B_SHARES_TWO, A_AGAIN], write_policy="write_through", **SMALL)
    assert fig["d2h_tokens"] == 1536 + (1472 - 1024)
    assert fig["h2d_tokens"] == 0 and fig["l2_hit_tokens"] == 0


def test_selective_backs_up_on_the_second_hit():
    fig = _replay([A, A_AGAIN, B_SHARES_TWO], **SMALL)
    # A's node gets its 2nd hit from A again (1536 backed up); B splits it: no new backup for B's tail.
    assert fig["d2h_tokens"] == 1536


UNRELATED = _req([10, 11, 12, 13], 2048)


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_capacity_forces_eviction_to_l2_and_a_load_back(policy):
    # L1 holds 2048 tokens: the unrelated request evicts A (to L2), and A's return evicts it in turn.
    fig = _replay([A, UNRELATED, A_AGAIN], l1_tokens=2048, l2_tokens=8192, write_policy=policy, **SMALL)
    assert (fig["l1_hit_tokens"], fig["l2_hit_tokens"]) == (0, 1536)
    assert fig["h2d_tokens"] == 1536
    assert fig["d2h_tokens"] == 1536 + 2048  # A, then the unrelated request (written through / back)
    assert fig["hit_rate"] == 1536 / (1536 + 2048 + 1536)


def test_without_a_backup_an_evicted_prefix_is_a_miss():
    fig = _replay([A, UNRELATED, A_AGAIN], l1_tokens=2048, l2_tokens=8192, **SMALL)  # selective: 1 hit each
    assert fig["l1_hit_tokens"] == fig["l2_hit_tokens"] == fig["d2h_tokens"] == 0


def test_no_l2_is_a_plain_radix_cache():
    fig = _replay([A, UNRELATED, A_AGAIN], l1_tokens=2048, l2_tokens=0, write_policy="write_through", **SMALL)
    assert fig["l1_hit_tokens"] == fig["l2_hit_tokens"] == fig["d2h_tokens"] == 0
    fig = _replay([A, A_AGAIN], l1_tokens=2048, l2_tokens=0, **SMALL)
    assert fig["l1_hit_tokens"] == 1536


def test_capacity_includes_the_live_request():
    # 1500 tokens need 24 pages live (the partial one too): 1472 + 64 > 1500-token L1 of 23 pages.
    fig = _replay([B_SHARES_TWO], l1_tokens=1472, **SMALL)
    assert fig["truncated_requests"] == 1
    fig = _replay([B_SHARES_TWO], l1_tokens=1536, **SMALL)
    assert fig["truncated_requests"] == 0


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct", "page_head"])
def test_materialized_and_symbolic_give_the_same_figures(layout):
    reqs = [A, UNRELATED, A_AGAIN, B_SHARES_TWO, UNRELATED, B_CUT]
    kw = dict(l1_tokens=2560, l2_tokens=8192, write_policy="write_through", host_layout=layout,
              attention="mha", heads=2, kv_dim=4, layers=3)
    real, symbolic = _replay(reqs, materialize=True, **kw), _replay(reqs, **kw)
    assert real["kv_mismatch_tokens"] == 0 and real["l2_hit_tokens"] > 0
    for key in JSON_KEYS:
        if key.endswith("seconds"):
            continue
        assert real[key] == symbolic[key], key
    assert real["modeled_transfer_seconds"] == pytest.approx(symbolic["modeled_transfer_seconds"])


def test_a_materialized_replay_runs_its_transfers_on_its_own_thread_with_the_threaded_figures(monkeypatch):
    """Inline (the default where the backend's work is synchronous, emu) and threaded controllers
    give the same figures, to the bit; inline leaves no thread behind on the caller's backend
    (threaded, the KV writer's default stream keeps one until the backend closes)."""
    reqs = [A, UNRELATED, A_AGAIN, B_SHARES_TWO, UNRELATED, B_CUT] * 2
    emu = get_backend("emu", "emu")
    spec = CacheSpec.of(backend=emu, l1_tokens=2560, l2_tokens=8192, write_policy="write_through",
                        attention="mha", heads=2, kv_dim=4, layers=3, materialize=True)
    assert inline_transfers(spec, emu)
    assert not inline_transfers(CacheSpec.of(l1_tokens=2560), get_backend("count", "emu"))  # priced: threads
    before = threading.active_count()
    inline = replay(spec, reqs)
    assert threading.active_count() == before
    monkeypatch.setattr(replay_module, "inline_transfers", lambda spec, backend: False)
    threaded = replay(spec, reqs)
    emu.close()
    assert inline["kv_mismatch_tokens"] == 0 and inline["l2_hit_tokens"] > 0 and inline["h2d_tokens"] > 0
    timed = {"wall_seconds", "read_seconds", "tokens_per_second", "max_d2h_enqueue_seconds", "max_h2d_enqueue_seconds"}
    assert {k: v for k, v in inline.items() if k not in timed} == {k: v for k, v in threaded.items() if k not in timed}


def test_replays_are_deterministic_and_free_list_order_does_not_change_hits():
    reqs = [A, UNRELATED, A_AGAIN, B_SHARES_TWO, UNRELATED, B_CUT] * 3
    kw = dict(l1_tokens=2560, l2_tokens=6144, write_policy="write_back", **SMALL)
    one, two, lifo = _replay(reqs, **kw), _replay(reqs, **kw), _replay(reqs, free_list="lifo", **kw)
    drop = lambda f: {k: v for k, v in f.items() if "seconds" not in k and k != "tokens_per_second"}  # noqa: E731
    assert drop(one) == drop(two)
    assert (lifo["l1_hit_tokens"], lifo["l2_hit_tokens"]) == (one["l1_hit_tokens"], one["l2_hit_tokens"])


def test_ghost_list_turns_a_returning_request_into_l2_hits_and_is_reported():
    # L1 holds one of A / UNRELATED at a time. Selective alone never backs either up (one hit
    # per node per life); with the ghost list A's return proves it reused, so it is backed up
    # before UNRELATED evicts it again, and A's third arrival loads it back from L2.
    reqs = [A, UNRELATED, A_AGAIN, UNRELATED, A_AGAIN]
    kw = dict(l1_tokens=2048, l2_tokens=8192, write_policy="write_through_selective", **SMALL)
    with_ghost, without = _replay(reqs, ghost=True, **kw), _replay(reqs, **kw)
    assert (without["l1_hit_tokens"], without["l2_hit_tokens"], without["d2h_tokens"]) == (0, 0, 0)
    assert (with_ghost["l1_hit_tokens"], with_ghost["l2_hit_tokens"]) == (0, 1536)
    assert with_ghost["d2h_tokens"] == 1536 + 2048  # A and UNRELATED, each on its proven return
    g = with_ghost["ghost"]
    assert g["bound"] >= 1024 and g["added"] == (1536 + 2048) // 64 and g["hits"] >= 2 and "ghost" not in without


def test_bad_capacity_is_refused_before_running():
    with pytest.raises(ValueError, match="^--l1-tokens"):
        _replay([A], l1_tokens=10, **SMALL)
    with pytest.raises(ValueError, match="materialize"):
        _replay([A], materialize=True, l1_tokens=1 << 40)


def test_bad_arguments_are_refused_by_name_before_running(tmp_path):
    missing = tmp_path / "no-such-trace.jsonl"  # checked first: the trace is not even read
    for kw, name in ((dict(write_policy="write_around"), "write_policy"), (dict(free_list="random"), "free_list"),
                     (dict(ghost=True, ghost_entries=0), "ghost_entries"), (dict(ghost_entries=2.5), "ghost_entries"),
                     (dict(page_size=0), "page_size"), (dict(l2_tokens=-1), "l2_tokens"), (dict(layers=0), "layers"),
                     (dict(dtype="int3"), "dtype"), (dict(host_layout="page_head"), "host_layout"),
                     (dict(ghost=1), "ghost"), (dict(materialize="yes"), "materialize")):
        with pytest.raises(ValueError, match=f"^--{name.replace('_', '-')}: "):  # the option it came from
            CacheSpec.of(**{**SMALL, **kw})
    for trace in (missing, [A]):
        with pytest.raises(ValueError, match="^limit: "):
            replay(CacheSpec.of(**SMALL), trace, limit=-1)
        with pytest.raises(ValueError, match="^spec: "):
            replay(dict(SMALL), trace)
    assert _replay([A], ghost=True, ghost_entries=5, **SMALL)["ghost"]["bound"] == 5


def test_unmaterialized_replays_run_on_count_and_a_mismatched_backend_is_refused():
    from hal.backend import get_backend

    emu, count = get_backend("emu", "emu"), get_backend("count", "emu")
    with pytest.raises(ValueError, match="^--materialize: backend 'emu' moves bytes, but materialize=False"):
        CacheSpec.of(backend=emu, **SMALL)
    with pytest.raises(ValueError, match="^--materialize: backend 'count' moves no bytes, but materialize=True"):
        CacheSpec.of(backend=count, materialize=True, **SMALL)
    reqs = [A, UNRELATED, A_AGAIN]
    kw = dict(l1_tokens=2048, l2_tokens=8192, write_policy="write_through", profile="emu", **SMALL)
    assert _replay(reqs, backend=count, **kw) == {**_replay(reqs, **kw), "wall_seconds": ANY, "read_seconds": ANY,
                                                  "tokens_per_second": ANY, "max_d2h_enqueue_seconds": ANY,
                                                  "max_h2d_enqueue_seconds": ANY, "spec": ANY}  # names the backend
    spec = CacheSpec.of(**SMALL)
    with pytest.raises(ValueError, match="^--materialize: backend 'emu' does not match materialize=False"):
        spec.build(emu, 4096)


# -- the CLI -------------------------------------------------------------------------------------

def _cli(args) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli_main(args)
    return rc, out.getvalue()


def test_cli_json_has_the_documented_keys(tmp_path):
    path = _write_trace(tmp_path / "t.jsonl", [A, B_SHARES_TWO, A_AGAIN])
    rc, out = _cli(["replay", "--trace", str(path), "--layers", "2", "--kv-dim", "8", "--json"])
    fig = json.loads(out)
    assert rc == 0 and set(JSON_KEYS) <= set(fig)
    assert fig["l1_hit_tokens"] == 1024 + 1536
    rc, out = _cli(["replay", "--trace", str(path), "--l1-tokens", "2k", "--l2-tokens", "8k", "--limit", "2"])
    assert rc == 0 and "hit rate" in out and "L1 1,984" in out  # 2k = 2000, rounded down to whole pages
    rc, out = _cli(["replay", "--trace", str(path), "--l1-tokens", "2KiB", "--limit", "2"])
    assert rc == 0 and "L1 2,048" in out  # binary units too (hal.common.units), as in every other CLI


def test_cli_bad_input_names_the_argument(tmp_path, capsys):
    path = _write_trace(tmp_path / "t.jsonl", [A])
    assert cli_main(["replay", "--trace", str(path), "--l1-tokens", "lots"]) == 2
    assert "--l1-tokens" in capsys.readouterr().err


# -- slices of the real trace ---------------------------------------------------------------------

def test_conversation_slice_figures_are_consistent(conversation):
    reqs = read_trace(conversation, limit=300)
    fig = _replay(conversation, limit=300, **SMALL)
    assert fig["requests"] == 300 and fig["input_tokens"] == sum(r.input_length for r in reqs)
    assert fig["hit_rate"] == (fig["l1_hit_tokens"] + fig["l2_hit_tokens"]) / fig["input_tokens"]
    assert fig["l1_hit_tokens"] > 0 and fig["l1_hit_tokens"] % 64 == 0
    assert fig["d2h_bytes"] == fig["d2h_tokens"] * 2 * 8 * 2  # layers x kv_dim x bf16


@pytest.mark.slow
def test_conversation_slice_materialized_matches_symbolic(conversation):
    kw = dict(limit=120, l1_tokens=120_000, l2_tokens=400_000, write_policy="write_through",
              host_layout="page_first_direct", layers=2, kv_dim=8)
    real, symbolic = _replay(conversation, materialize=True, **kw), _replay(conversation, **kw)
    assert real["kv_mismatch_tokens"] == 0
    for key in ("l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens", "d2h_segments", "h2d_segments"):
        assert real[key] == symbolic[key], key


@pytest.mark.slow
def test_bench_replay_runs_and_reports(tmp_path):
    path = _write_trace(tmp_path / "t.jsonl", [A, B_SHARES_TWO, A_AGAIN])
    rc, out = _cli(["bench", "replay", "--trace", str(path), "--repeat", "1", "--json"])
    result = json.loads(out)
    assert rc == 0 and result["requests"] == 3
    assert result["ours"]["hit_tokens"] == result["ours_tree_only"]["hit_tokens"] == 1024 + 1536
    assert cli_main(["bench", "replay", "--trace", str(path), "--sglang-root", str(tmp_path)]) == 2


@pytest.mark.slow
def test_bench_replay_measures_the_per_page_overhead(tmp_path):
    path = _write_trace(tmp_path / "t.jsonl", [A, B_SHARES_TWO, A_AGAIN])
    rc, out = _cli(["bench", "replay", "--trace", str(path), "--repeat", "1", "--overhead-requests", "3",
                    "--write-policy", "write_through", "--json"])
    over = json.loads(out)["overhead"]
    assert rc == 0 and over["requests"] == 3 and over["kv_mismatch_tokens"] == 0
    assert over["pages_moved"] > 0 and over["bytes_moved"] == over["pages_moved"] * 64 * 2 * 64 * 2
    assert over["overhead_us_per_page"] >= 0 and over["kv_fill_and_check_seconds"] > 0


@pytest.mark.slow
def test_bench_replay_measures_a_file_l3_against_plain_file_io(tmp_path):
    path = _write_trace(tmp_path / "t.jsonl", [A, B_SHARES_TWO, A_AGAIN])
    rc, out = _cli(["bench", "replay", "--trace", str(path), "--repeat", "1", "--file-l3-requests", "3",
                    "--write-policy", "write_through", "--json"])
    l3 = json.loads(out)["file_l3"]
    assert rc == 0 and l3["requests"] == 3 and l3["l3_pages_written"] > 0
    # The peer moves the store's objects: page bytes at the bench geometry (64 tokens x 2 layers x 64 x bf16).
    assert l3["l3_bytes"] == (l3["l3_pages_written"] + l3["l3_pages_read"]) * 64 * 2 * 64 * 2
    assert l3["peer_write_seconds"] > 0 and l3["l3_over_peer"] is not None


# -- the packaged traces -------------------------------------------------------------------------

PACKAGED = ("conversation_trace.jsonl.gz", "synthetic_trace.jsonl.gz", "LICENSE-APACHE", "README.md")


@pytest.mark.slow
def test_the_mooncake_traces_ship_in_the_package_with_their_license(monkeypatch, tmp_path):
    monkeypatch.delenv("HICACHE_TRACES", raising=False)
    monkeypatch.chdir(tmp_path)  # found through the package, not the working directory
    folder = packaged_traces()
    assert all((folder / name).is_file() for name in PACKAGED)
    assert "Apache License" in (folder / "LICENSE-APACHE").read_text()
    assert "kvcache-ai/Mooncake" in (folder / "README.md").read_text()
    conv, synth = find_trace("conversation_trace.jsonl"), find_trace("synthetic_trace.jsonl")
    assert conv.name == "conversation_trace.jsonl.gz" and synth.name == "synthetic_trace.jsonl.gz"
    assert (len(read_trace(conv)), len(read_trace(synth))) == (12031, 3993)
    assert find_trace("no_such_trace.jsonl") is None


def test_pyproject_package_data_covers_every_packaged_trace_file():
    import fnmatch
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hicache_ref"]
    for name in PACKAGED:
        assert any(fnmatch.fnmatch(f"sim/trace/data/{name}", g) for g in globs), name


def test_gzipped_user_traces_read_like_plain_ones_and_hicache_traces_overrides(monkeypatch, tmp_path):
    plain = _write_trace(tmp_path / "mine.jsonl", [A, B_SHARES_TWO, A_AGAIN])
    packed = tmp_path / "packed" / "mine.jsonl.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(packed) == read_trace(plain)
    assert [(r.input_length, r.hash_ids) for r in read_trace(str(packed), limit=2)] == [(1536, (1, 2, 3)),
                                                                                      (1500, (1, 2, 9))]
    monkeypatch.setenv("HICACHE_TRACES", str(packed.parent))
    assert find_trace("mine.jsonl") == packed  # the .gz of the name asked for
    monkeypatch.setenv("HICACHE_TRACES", str(tmp_path))
    assert find_trace("mine.jsonl") == plain
    assert find_trace("conversation_trace.jsonl").name == "conversation_trace.jsonl.gz"  # else the packaged one


@pytest.mark.slow
def test_replay_and_bench_replay_work_from_a_wheel_install_with_no_checkout(tmp_path):
    """Build a wheel from the sources, install it in a fresh venv (torch etc. from this
    interpreter's site-packages), and run both commands on their default trace elsewhere."""
    import os
    import shutil
    import sys
    import venv
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:  # the wheel is built here, without build isolation (no index needed): pyproject's build-system
        setuptools_ok = int(dist_version("setuptools").split(".")[0]) >= 68
    except (PackageNotFoundError, ValueError):
        setuptools_ok = False
    if not setuptools_ok:
        pytest.skip("building the wheel needs setuptools>=68 in this environment (pyproject.toml's build-system)")
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
    for pkg in ("hal", "hicache_ref", "conformance", "hardware_profiles"):
        shutil.copytree(root / pkg, src / pkg, ignore=skip)
    shutil.copy(root / "pyproject.toml", src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HICACHE_TRACES")}
    run = lambda *cmd, **kw: checked_run.run(cmd, env=env, **kw)  # noqa: E731
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
        str(src))
    shutil.rmtree(src)  # no checkout beside the install
    venv.create(tmp_path / "venv", with_pip=False)
    py = str(tmp_path / "venv" / "bin" / "python")
    # torch and the other dependencies from where this interpreter has them (a user's venv, or the system
    # Python in CI): a .pth adds those folders without running their .pth files, so an editable
    # install of the checkout there stays out of the new venv.
    import sysconfig

    site = run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    # every site folder this interpreter reads: a venv's own, and the base's where the venv was made
    # with --system-site-packages (torch may live in either)
    import site as host_site

    deps = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | set(host_site.getsitepackages())
    deps = {d for d in deps if os.path.isdir(d)}
    Path(site, "_host_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    run(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", str(wheel))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fig = json.loads(run(py, "-m", "conformance.cli.main", "replay", "--limit", "20", "--layers", "2", "--json",
                         cwd=elsewhere).stdout)
    assert fig["requests"] == 20 and fig["trace"].startswith(str(tmp_path / "venv"))
    assert fig["trace"].endswith("conversation_trace.jsonl.gz")
    bench = json.loads(run(py, "-m", "conformance.cli.main", "bench", "replay", "--limit", "20", "--repeat", "1",
                           "--json", cwd=elsewhere).stdout)
    assert bench["requests"] == 20 and bench["trace"] == fig["trace"]


@pytest.mark.slow  # runs the command or pytest in a child process
def test_huge_capacity_takes_memory_for_what_the_trace_uses_not_for_capacity():
    """`replay --limit 50 --l1-tokens 50G` took 6.3 GB of free list for 781M pages it never used.
    Compared with the same replay at 64K tokens in the same environment, so what is measured is
    what the capacity costs (a process's baseline differs between machines and test sessions)."""
    import subprocess
    import sys

    def peak_kib(l1: str) -> int:
        code = ("import resource, sys\n"
                "from conformance.cli.main import main\n"
                f"rc = main(['replay', '--limit', '50', '--l1-tokens', '{l1}', '--json'])\n"
                "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rc, file=sys.stderr)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        rss_kib, rc = (int(x) for x in out.stderr.strip().splitlines()[-1].split()[1:])
        assert rc in (0, None) and '"requests": 50' in out.stdout
        return rss_kib

    small, huge = peak_kib("64K"), peak_kib("50G")
    assert huge - small < 1 << 19, f"peak RSS {huge / 1024:.0f} MiB at 50G tokens, {small / 1024:.0f} MiB at 64K"
