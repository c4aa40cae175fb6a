"""The xpu backend's Kunlun-facing code on a STAND-IN runtime (tests/fixtures/xpu_standin: torch.library ops, a torch_xmlir-shaped module, a C libxpurt): no XPU is claimed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "fixtures" / "xpu_standin"
TIMEOUT_S = 600


pytestmark = pytest.mark.slow  # builds the stand-in runtime and runs it in child processes


@pytest.fixture(scope="module")
def standin_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a child that imports the stand-in runtime (never this process: its
    torch_xmlir and torch.ops.xspeedgate_ops would be seen by every later test)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc here to build the stand-in libxpurt (apt-get install gcc)")
    lib = tmp_path_factory.mktemp("libxpurt") / "libxpurt.so"
    subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(lib), str(STANDIN / "libxpurt.c"),
                    "-lpthread"], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_", "HICACHE_", "CUDA_VISIBLE"))}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(STANDIN)]), HICACHE_STANDIN_LIBXPURT=str(lib))
    return env


def _conform(env: dict, out: Path, vendor_module: str, keyword: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "conformance.cli.main", "conform", "--backend-module",
                          "xpu_standin_backend", "--backend", "xpu-standin", "--profile", "p800", "--out", str(out),
                          "-n", "0", "-k", keyword], env={**env, "HICACHE_XPU_VENDOR_MODULE": vendor_module},
                         capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert (out / "summary.json").is_file(), run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


# The public regime (page rows) in each page size and dtype, then the token-granular MLA cases.
VENDOR_CASES = "layout_equivalence and vendor and (pagerows or (mla and ps16 and bf16))"


@pytest.mark.parametrize("vendor_module", ["xspeedgate_ops", "xspeedgate_ops_permuted"])
def test_layout_equivalence_passes_on_the_standin_in_either_argument_order(standin_env, tmp_path, vendor_module):
    summary = _conform(standin_env, tmp_path / "conform", vendor_module, VENDOR_CASES)
    totals = summary["totals"]
    assert summary["backend"] == "xpu-standin"
    assert totals["failed"] == 0 and totals["errors"] == 0, summary["failures"]
    # 54 page-row cases, then the token-granular all-layer and per-layer MLA layer_first ones.
    assert totals["passed"] >= 54 + 2, totals
    assert summary["verdict"] == "PARTIAL"  # -k: a selection is never a sign-off


def test_the_permuted_standin_really_swaps_a_positional_caller(standin_env):
    # What makes the test above mean something: a caller passing positions in upstream's
    # order gets source and destination swapped by the permuted build.
    code = """
import torch, xspeedgate_ops_permuted
src, dst = torch.arange(16, dtype=torch.uint8), torch.zeros(16, dtype=torch.uint8)
i = torch.tensor([0, 1])
torch.ops.xspeedgate_ops.transfer_kv_per_layer_mla(src, dst, i, i, 8, 2, 32)
print(int(dst.sum()), int(src.sum()))
"""
    run = subprocess.run([sys.executable, "-c", code], env=standin_env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["0", "0"]  # the zeros were copied over the source; dst untouched


def _registration(env: dict, mode: str) -> dict:
    run = subprocess.run([sys.executable, str(STANDIN / "registration_probe.py"), mode], env=env,
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_a_copy_across_two_registrations_is_refused_and_never_planned(standin_env):
    got = _registration(standin_env, "harness")
    assert got["libxpurt"] == standin_env["HICACHE_STANDIN_LIBXPURT"]  # the mapped runtime, no other
    assert got["across_two"] == 1 and got["within_one"] == 0  # the stand-in driver's rule
    assert got["registrations"] == 1  # one registration for the whole host buffer
    assert got["error"] is None and got["same_bytes"] and got["refused_copies"] == 0


def test_registering_in_pieces_is_what_the_driver_refuses(standin_env):
    # Registered in pieces (what the harness avoids): the same plans then cross a boundary.
    got = _registration(standin_env, "chunked")
    assert got["registrations"] > 1 and got["refused_copies"] >= 1
    assert "error 1 (invalid argument)" in got["error"]


def test_backends_json_records_each_vendor_ops_schema_and_the_stack(standin_env):
    code = "import sys, xpu_standin_backend; from conformance.cli.main import main; sys.exit(main(['backends', '--json']))"
    run = subprocess.run([sys.executable, "-c", code], env=standin_env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    row = {r["name"]: r for r in json.loads(run.stdout)["backends"]}["xpu-standin"]
    schemas = row["vendor_kernels"]["schemas"]
    assert schemas["transfer_kv_all_layer_mla"].startswith(
        "xspeedgate_ops::transfer_kv_all_layer_mla(Tensor src_layers, Tensor dst_layers, Tensor src_indices")
    assert "Tensor(a!) dst" in schemas["transfer_kv_per_layer_mla"]
    stack = row["stack"]
    assert stack["torch_xmlir"] == "0.0.0+standin" and stack["xspeedgate_ops"] == "0.0.0+standin"
    assert stack["libxpurt"] == standin_env["HICACHE_STANDIN_LIBXPURT"] and stack["python"] == sys.version.split()[0]
    assert "driver" in stack  # None here: no xpu-smi
