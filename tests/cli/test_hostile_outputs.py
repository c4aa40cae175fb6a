"""Outputs onto what is not a regular file (issue 41): a FIFO, a device, a socket, a directory, a
folder that is a link; and every output of a command checked before the first is written, so a bad
PNG target never costs the previous JSON."""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest

from conformance.cli.main import main
from conformance.common.errors import CliError
from conformance.common.inputs import output_folder
from conformance.common.outputs import emit_result
from conformance.common.safe_write import check_target, write_text

SYNTH = ["--requests", "10", "--min-tokens", "512", "--max-tokens", "1024", "--reuse", "0.5"]


def one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_write_onto_a_fifo_a_socket_or_a_directory_is_refused_and_it_stays(tmp_path):
    fifo, sock, folder = tmp_path / "f", tmp_path / "s", tmp_path / "d"
    os.mkfifo(fifo)
    folder.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        for target, kind in ((fifo, "a FIFO"), (sock, "a socket"), (folder, "a directory")):
            with pytest.raises(CliError, match=kind):
                write_text(target, "x")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISSOCK(os.lstat(sock).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_dev_null_is_refused_as_a_device_before_any_write():
    with pytest.raises(CliError, match="a character device"):
        check_target("/dev/null")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_trace_synth_onto_a_fifo_or_a_device_is_refused(tmp_path, capsys, kind):
    target = tmp_path / "t.jsonl"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target = "/dev/null"
    assert main(["trace", "synth", "--out", str(target), *SYNTH]) == 2
    assert "--out" in one_line_err(capsys)
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_an_output_folder_that_is_a_link_is_refused(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert main(["trace", "synth", "--out", str(tmp_path / "link" / "t.jsonl"), *SYNTH]) == 2
    assert "symbolic link" in one_line_err(capsys)
    with pytest.raises(CliError, match="--out: .*symbolic link"):
        output_folder("--out", tmp_path / "link")
    assert list((tmp_path / "real").iterdir()) == []


def test_every_output_is_checked_before_the_first_write_and_the_old_json_stays(tmp_path):
    (tmp_path / "sweep.json").write_text('{"old": 1}')
    (tmp_path / "sweep.png").mkdir()  # where the plot would go

    def plot(path, result):
        raise AssertionError("the plot is not reached")

    with pytest.raises(CliError, match="sweep.png: is a directory"):
        emit_result({"new": 1}, tmp_path, "sweep", plot, False, [])
    assert json.loads((tmp_path / "sweep.json").read_text()) == {"old": 1}
    (tmp_path / "sweep.png").rmdir()
    os.mkfifo(tmp_path / "readings.png")
    with pytest.raises(CliError, match="readings.png: is a FIFO"):
        emit_result({"new": 1}, tmp_path, "sweep", plot, False, [], also=("readings.png",))
    assert json.loads((tmp_path / "sweep.json").read_text()) == {"old": 1}


def test_calibrate_checks_its_calibration_json_before_it_measures(tmp_path, capsys):
    os.mkfifo(tmp_path / "p.calibration.json")
    assert main(["calibrate", "--backend", "emu", "--out", str(tmp_path / "p.yaml")]) == 2
    err = one_line_err(capsys)
    assert "p.calibration.json: is a FIFO" in err and not (tmp_path / "p.yaml").exists()


def test_the_l3_link_profile_goes_through_the_safe_writer(tmp_path):
    from conformance.calibrate import l3_link

    target = tmp_path / "p.yaml"
    os.mkfifo(target)
    with pytest.raises(CliError, match="a FIFO"):
        l3_link.write(target, None, {}, "who")  # refused before the profile is made
