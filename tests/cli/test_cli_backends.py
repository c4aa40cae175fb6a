"""`hicache backends [--json]`: every backend with available, reason, devices, copy modes, vendor kernels."""

from __future__ import annotations

import json

from conformance.cli.main import main
from hal.backend import available_backends, backend_class

KEYS = {"name", "available", "reason", "device_type", "device_name", "device_count", "copy_modes", "copy_mode",
        "vendor_kernels", "stack"}


def _rows(capsys, *extra):
    assert main(["backends", "--json", *extra]) == 0
    return {r["name"]: r for r in json.loads(capsys.readouterr().out)["backends"]}


def test_json_lists_every_backend_with_every_key(capsys):
    rows = _rows(capsys)
    assert sorted(rows) == available_backends()
    for name, row in rows.items():
        assert set(row) == KEYS
        ok, why = backend_class(name).probe()
        assert (row["available"], row["reason"]) == (ok, why)
        assert set(row["vendor_kernels"]) == {"source", "ops", "reason", "schemas"}
        if not row["available"]:
            assert row["reason"] and row["device_count"] == 0


def test_device_backends_list_both_copy_modes_and_their_vendor_kernels(capsys, monkeypatch):
    monkeypatch.delenv("HICACHE_COPY_MODE", raising=False)
    rows = _rows(capsys)
    for name, module in (("cuda", "sgl_kernel"), ("xpu", "xspeedgate_ops")):
        assert rows[name]["copy_modes"] == ["descriptor", "gather"] and rows[name]["copy_mode"] == "gather"
        vk = rows[name]["vendor_kernels"]
        if vk["source"] is None:
            assert vk["reason"].startswith(module) and vk["ops"] == []
    assert rows["emu"]["available"] and rows["emu"]["copy_modes"] == [] and rows["emu"]["copy_mode"] is None
    assert rows["emu"]["device_count"] == 1
    monkeypatch.setenv("HICACHE_COPY_MODE", "descriptor")
    assert _rows(capsys)["cuda"]["copy_mode"] == "descriptor"


def test_table_names_each_backend_and_why_not(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    for name in available_backends():
        assert any(line.startswith(name) for line in out.splitlines())
    ok, why = backend_class("cuda").probe()
    if not ok:
        assert f"not available: {why}" in out


def test_bad_copy_mode_environment_is_one_line_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("HICACHE_COPY_MODE", "turbo")
    assert main(["backends"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hicache: HICACHE_COPY_MODE: 'turbo' is not one of descriptor, gather"]
