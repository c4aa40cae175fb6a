"""`hicache bench transfer --backend B --copy-mode M`: refused in one line where B or M is absent; emu as before."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hal.backend import backend_class

SMALL = ["--tokens", "256", "--layers", "2", "--kv-dim", "64", "--page-size", "16", "--repeat", "1"]


def _err(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_emu_run_names_its_backend_and_no_copy_mode(capsys):
    assert main(["bench", "transfer", *SMALL, "--host-layout", "page_first_direct", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "emu" and out["copy_mode"] is None and out["peer"] == "contiguous torch copy"
    assert out["layouts"]["page_first_direct"]["d2h"]["segments"] > 0


@pytest.mark.parametrize("name", ["cuda", "xpu"])
@pytest.mark.parametrize("mode", ["descriptor", "gather"])
def test_absent_device_is_refused_naming_the_backend(capsys, name, mode):
    ok, why = backend_class(name).probe()
    if ok:
        pytest.skip(f"{name} is available here")
    assert main(["bench", "transfer", "--backend", name, "--copy-mode", mode, *SMALL]) == 2
    assert _err(capsys) == [f"hicache: --backend: backend {name!r} is not available here: {why}"]


def test_copy_mode_on_a_backend_without_modes_is_refused(capsys):
    assert main(["bench", "transfer", "--copy-mode", "descriptor", *SMALL]) == 2
    assert _err(capsys) == ["hicache: --copy-mode: backend 'emu' has no copy modes (it runs plans one way)"]


def test_unknown_backend_and_mode_are_one_line(capsys):
    assert main(["bench", "transfer", "--backend", "tpu", *SMALL]) == 2
    (line,) = _err(capsys)  # other tests may have registered more backends in this process
    head, _, known = line.partition("; known: ")
    assert head == "hicache: --backend: unknown backend 'tpu'"
    assert {"count", "cuda", "emu", "xpu"} <= set(known.split(", "))  # and any backend file added
    assert main(["bench", "transfer", "--copy-mode", "fast", *SMALL]) == 2
    (line,) = _err(capsys)
    assert line.startswith("hicache: --copy-mode: invalid choice: 'fast'")
