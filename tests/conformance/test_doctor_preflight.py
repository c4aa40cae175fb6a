"""Preflight of the Kunlun stack (doctor, ci/device-check.sh, the xpu probe): each refusal is one line naming the variable."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conformance.doctor.checks import run_doctor
from hal.backends.support import kunlun_stack
from hal.backends.xpu import XpuBackend

ROOT = Path(__file__).resolve().parents[2]
IDS = ["0000:1b:00.0", "0000:3d:00.0", "0000:5e:00.0", "0000:89:00.0"]
# The shape of xpu-smi's device table (it mirrors nvidia-smi's): one bus id per device line.
SMI = """+-----------------------------------------------------------------------------+
| XPU-SMI               Driver Version: 5.0.21.10      XPU-RT Version: 5.0.21   |
| DevID  Name            Bus-Id         Memory-Usage      UseRate  |
|   0    P800 OAM        0000:1b:00.0   0MiB / 98304MiB   0%       |
|   1    P800 OAM        0000:3d:00.0   0MiB / 98304MiB   0%       |
|   2    P800 OAM        0000:5e:00.0   0MiB / 98304MiB   0%       |
|   3    P800 OAM        0000:89:00.0   0MiB / 98304MiB   0%       |
"""


def _one_line_naming(lines: list[str], variable: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{variable}: ") and "\n" not in lines[0], lines[0]


def test_dummy_events_are_refused_naming_the_variable():
    _one_line_naming(kunlun_stack.environment_refusals({"XPU_DUMMY_EVENT": "1"}), "XPU_DUMMY_EVENT")
    assert kunlun_stack.environment_refusals({"XPU_DUMMY_EVENT": ""}) == []  # set empty: unset


def test_visible_device_lists_must_be_equal():
    _one_line_naming(kunlun_stack.environment_refusals({"XPU_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "1,0"}),
                     "XPU_VISIBLE_DEVICES")
    _one_line_naming(kunlun_stack.environment_refusals({"XPU_VISIBLE_DEVICES": "0,1"}), "XPU_VISIBLE_DEVICES")
    assert kunlun_stack.environment_refusals({"XPU_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "2,3"}) == []


def test_xpu_smi_bus_ids_are_read_in_device_order_and_the_driver_version_kept():
    assert kunlun_stack.smi_bus_ids(SMI) == IDS
    assert kunlun_stack.stack_versions("xspeedgate_ops", SMI)["driver"] == "5.0.21.10"


@pytest.mark.parametrize("visible, torch_ids, refused", [
    (None, IDS, False),
    ("2,3", IDS[2:], False),
    (None, [IDS[1], IDS[0], *IDS[2:]], True),  # torch ordered the cards otherwise than xpu-smi
    ("2,3", IDS[:2], True),  # visible 2,3 but torch's devices are xpu-smi's 0 and 1
])
def test_device_order_is_checked_by_bus_id(visible, torch_ids, refused):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    why = kunlun_stack.device_order_refusal(env, torch_ids, kunlun_stack.smi_bus_ids(SMI))
    if refused:
        _one_line_naming([why], "CUDA_DEVICE_ORDER")
    else:
        assert why is None


def test_only_one_mapped_runtime_is_accepted():
    _one_line_naming([kunlun_stack.runtime_refusal([])], "libxpurt")
    _one_line_naming([kunlun_stack.runtime_refusal(["/a/libxpurt.so", "/b/libxpurt.so.1"])], "libxpurt")
    assert kunlun_stack.runtime_refusal(["/a/libxpurt.so"]) is None


def test_the_xpu_backend_is_unavailable_with_dummy_events(monkeypatch):
    monkeypatch.setenv("XPU_DUMMY_EVENT", "1")
    ok, why = XpuBackend.probe()
    assert not ok and why.startswith("XPU_DUMMY_EVENT: ")  # so conform, bench and calibrate refuse too


def test_doctor_fails_a_preflight_check_per_refusal(monkeypatch):
    monkeypatch.setenv("XPU_DUMMY_EVENT", "1")
    monkeypatch.setenv("XPU_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    report = run_doctor("xpu", "p800")
    failed = [c.value for c in report.checks if c.name == "preflight" and c.status == "fail"]
    assert [line.split(":")[0] for line in failed] == ["XPU_DUMMY_EVENT", "XPU_VISIBLE_DEVICES"]
    assert report.exit_code() == 1 and set(report.to_dict()["stack"]) >= {"python", "torch", "torch_xmlir", "driver",
                                                                           "libxpurt", "xspeedgate_ops"}


def test_doctor_passes_the_preflight_in_a_clean_environment(monkeypatch):
    for name in ("XPU_DUMMY_EVENT", "XPU_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    checks = [c for c in run_doctor("xpu", "p800").checks if c.name == "preflight"]
    assert [c.status for c in checks] == ["ok"]


@pytest.mark.parametrize("env, variable", [({"XPU_DUMMY_EVENT": "1"}, "XPU_DUMMY_EVENT"),
                                           ({"XPU_VISIBLE_DEVICES": "1,0", "CUDA_VISIBLE_DEVICES": "0,1"},
                                            "XPU_VISIBLE_DEVICES")])
@pytest.mark.slow
def test_device_check_refuses_before_writing_anything(tmp_path, env, variable):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_", "CUDA_VISIBLE"))}
    run = subprocess.run(["bash", str(ROOT / "ci" / "device-check.sh"), "--backend", "xpu", str(tmp_path / "out")],
                         env={**clean, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.splitlines() == [next(line for line in run.stderr.splitlines() if variable in line)]
    assert run.stderr.startswith(f"device-check: {variable}: ")
    assert not (tmp_path / "out").exists()
