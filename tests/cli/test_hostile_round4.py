"""A hostile pass on the outputs of replay, sweep and ablate on other accelerators (docs/hostile-cases.md,
round 4): a plot that fails leaves no file of the run, and every modeled line says how sure it is."""

from __future__ import annotations

import json
import os

import pytest

from conformance.common.outputs import emit_result


def _broken_plot(path, result):
    path.write_bytes(b"half a png")  # what a plot writes before it fails
    raise ValueError("'yerr' must not contain negative values")


def test_a_failing_plot_leaves_no_file_and_no_folder_of_the_run(tmp_path, capsys):
    """ablate --profile h200 wrote ablate.json, then its plot failed: a JSON with no plot or report."""
    out = tmp_path / "new" / "out"
    with pytest.raises(ValueError):
        emit_result({"x": 1}, out, "ablate", _broken_plot, False, ["line"], report="<html>")
    assert not out.exists() and capsys.readouterr().out == ""


def test_a_failing_plot_keeps_the_previous_run_as_it_was(tmp_path):
    (tmp_path / "ablate.json").write_text('{"old": true}\n')
    (tmp_path / "ablate.png").write_bytes(b"old png")
    with pytest.raises(ValueError):
        emit_result({"x": 1}, tmp_path, "ablate", _broken_plot, False, ["line"], report="<html>")
    assert sorted(os.listdir(tmp_path)) == ["ablate.json", "ablate.png"]
    assert json.loads((tmp_path / "ablate.json").read_text()) == {"old": True}
    assert (tmp_path / "ablate.png").read_bytes() == b"old png"


def test_a_plot_and_its_companions_land_beside_the_json(tmp_path, capsys):
    def plot(path, result):
        path.write_bytes(b"png")
        path.with_name("readings.png").write_bytes(b"readings")

    emit_result({"x": 1}, tmp_path, "ablate", plot, True, [], report="<html>", also=("readings.png",))
    assert sorted(os.listdir(tmp_path)) == ["ablate.json", "ablate.png", "readings.png", "report.html"]
    assert json.loads(capsys.readouterr().out) == {"x": 1}


@pytest.mark.parametrize("v, signed, text", [(-0.4736, False, "-0.474 s"), (0.0309, True, "+0.0309 s"),
                                             (1234.4, False, "1234 s"), (12.0, True, "+12 s")])
def test_ablate_bars_are_labelled_in_significant_digits(v, signed, text):
    """On h200 every rung's net benefit is under a second: each bar read "-0 s" or "+0 s"."""
    from conformance.cli.plots import seconds_label

    assert seconds_label(v, signed) == text
