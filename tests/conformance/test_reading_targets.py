"""The profile's readings are conform's modeled targets: a wrong parameter fails the readings it
decides, named, with the model's value and the seed's; a profile without readings has none; the
report and summary open with the answer and draw a modeled pass apart from a measured one."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from conformance.cli.main import main
from conformance.report import schema
from conformance.report.answer import ANSWER_READING, answer
from conformance.targets.evaluate import TargetContext
from conformance.targets.readings import SHARED_ROWS, reading_names, reading_rows
from conformance.targets.verdict import RESULTS_ENV
from hardware_profiles import load_profile
from hardware_profiles.readings import load_readings

ROOT = Path(__file__).resolve().parents[2]
# the readings a per-segment cost of 1 us cannot meet: the seed's inline submission of 9,984
# segments took 1.3 s, and it tripled the first request
SEGMENT_READINGS = ("d2h_submission_inline", "first_request_first_build")


def wrong_segment_profile(folder: Path) -> Path:
    """p800.yaml with link.per_segment_us 1.0, in a folder with no readings/ beside it."""
    text = (ROOT / "hardware_profiles" / "p800.yaml").read_text()
    text, n = re.subn(r"(\n  per_segment_us:\n    value: )[^\n]+", r"\g<1>1.0", text)
    assert n == 1 and "\nreadings: p800.yaml\n" in text
    path = folder / "wrong_segments.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    """(profile, rows, results folder): the wrong profile's reading rows, taken with the results
    folder set as `hicache conform` sets it."""
    folder = tmp_path_factory.mktemp("wrong-profile")
    profile = load_profile(str(wrong_segment_profile(folder)))
    results = folder / "results"
    results.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RESULTS_ENV, str(results))
        rows = reading_rows(TargetContext(None, profile, "no backend: readings need none"))
    return profile, rows, results


@pytest.mark.slow
def test_a_profile_in_another_folder_finds_the_packaged_readings(wrong):
    profile, rows, _ = wrong
    readings = load_readings(profile)
    assert readings.path.resolve() == (ROOT / "hardware_profiles" / "readings" / "p800.yaml").resolve()
    assert list(rows) == reading_names(profile) == [r.name for r in readings.readings]


@pytest.mark.parametrize("name", SEGMENT_READINGS)
@pytest.mark.slow
def test_a_wrong_per_segment_cost_fails_the_readings_it_decides_named(wrong, name):
    _, rows, _ = wrong
    row = rows[name]
    jsonschema.validate(row, schema.TARGET_ROW)
    assert (row["kind"], row["basis"], row["verdict"]) == ("reading", "modeled", "fail"), row
    seed = load_readings(wrong[0]).reading(name)
    assert row["target"] == seed.value and row["reading"]["within"] is False
    assert row["value"] is not None and abs(row["value"] - seed.value) > row["tolerance"]
    # the reason gives the model's value, the seed's, the tolerance and how the reading is read
    assert f"model {row['value']:.4g} s vs seed {seed.value:g} s: outside the tolerance" in row["reason"]
    assert "within 15%" in row["reason"] and seed.interpretation in row["reason"]
    assert "link.per_segment_us" in row["inputs"]


@pytest.mark.slow
def test_reading_rows_are_taken_once_per_run_and_shared(wrong):
    profile, rows, results = wrong
    kept = json.loads((results / SHARED_ROWS).read_text())
    assert kept["profile"] == str(profile.path) and [r["reading"] for r in kept["rows"]] == list(rows)
    # a second worker of the run reads the rows the first took (here: one changed on disk)
    kept["rows"][0]["model"], kept["rows"][0]["within"] = 123.0, True
    (results / SHARED_ROWS).write_text(json.dumps(kept))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RESULTS_ENV, str(results))
        again = reading_rows(TargetContext(None, profile, "none"))
    first = kept["rows"][0]["reading"]
    assert again[first]["value"] == 123.0 and again[first]["verdict"] == "pass"


def test_a_profile_without_readings_has_no_reading_rows():
    for name in ("emu", "h200", "p900"):
        profile = load_profile(name)
        assert load_readings(profile) is None and reading_names(profile) == []
        assert reading_rows(TargetContext(None, profile, "none")) == {}
        a = answer(profile, [])
        assert a["scenario"] is None and a["ttft_change_pct"] is None and a["readings_total"] == 0
        assert a["text"] == f"no scenario: profile {name} has no readings, so this report cannot say whether " \
                            f"HiCache pays off here; `hicache ablate --scenario seed --profile {name}` prices the " \
                            f"seed's workload on it and `hicache replay --profile {name} --trace YOURS.jsonl` the " \
                            "team's own traffic"


def _reading(name, verdict, value, seed=-36.0):
    return {"name": name, "kind": "reading", "verdict": verdict, "value": value, "target": seed, "reason": "r"}


def test_the_answer_is_the_ttft_change_with_every_fix_on():
    p800 = load_profile("p800")
    gain = answer(p800, [_reading(ANSWER_READING, "fail", -12.5), _reading("x", "pass", 1.0),
                         _reading("y", "not_measured", None)])
    assert (gain["ttft_change_pct"], gain["seed_ttft_change_pct"], gain["gain"]) == (-12.5, -36.0, True)
    assert (gain["readings_within"], gain["readings_outside"], gain["readings_not_measured"],
            gain["readings_total"]) == (1, 1, 1, 3)
    # a row without an ensemble's intervals: the central value decides, shown as its own interval
    assert gain["answer"] == "gain" and gain["ttft_change_pct_interval"] is None
    assert gain["text"].startswith("gain: HiCache pays off on profile p800's scenario: TTFT -12.50% "
                                   "[-12.50%, -12.50%, 5-95%] vs HiCache off")
    assert gain["scenario"] == " ".join(load_readings(p800).scenario["description"].split())
    loss = answer(p800, [_reading(ANSWER_READING, "fail", 4.0)])
    assert loss["gain"] is False and loss["text"].startswith("loss: HiCache does not pay off")
    spread_row = {**_reading(ANSWER_READING, "pass", -3.0),
                  "reading": {"answer": "undecided", "ttft_change_pct_interval": [-9.0, 2.5],
                              "net_benefit_seconds_interval": [-10.0, 40.0], "ensemble_members": 64}}
    undecided = answer(p800, [spread_row])
    assert undecided["answer"] == "undecided" and undecided["gain"] is True  # gain: the central value's sign
    assert undecided["text"].startswith("undecided: the model cannot tell whether HiCache pays off on profile p800's "
                                        "scenario: TTFT -3.00% [-9.00%, +2.50%, 5-95%]")
    assert loss["net_seconds"] is None
    net = answer(p800, [{**_reading(ANSWER_READING, "pass", -30.0), "reading": {"net_seconds": 812.5}}])
    assert net["net_seconds"] == 812.5 and ", net +812.5 s of prefill-server time;" in net["text"]
    none = answer(p800, [_reading("x", "pass", 1.0)])
    assert none["ttft_change_pct"] is None and none["text"].startswith("no scenario")
    for a in (gain, loss, net, none):
        jsonschema.validate(a, schema.ANSWER)


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory):
    """`hicache conform` on the wrong profile: the readings it breaks, the answer's reading, and
    a measured target and a modeled reading that pass (the ghost list's bytes, measured both ways)."""
    folder = tmp_path_factory.mktemp("conform-wrong")
    prof = wrong_segment_profile(folder)
    out = folder / "out"
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), old) if p)
    keyword = "test_target and (ghost or " + " or ".join((*SEGMENT_READINGS, ANSWER_READING)) + ")"
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # what conform prints itself (the child's output goes past)
            rc = main(["conform", "--out", str(out), "-n", "0", "--profile", str(prof), "-k", keyword])
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return rc, out, printed.getvalue().splitlines()


@pytest.mark.slow  # runs the command or pytest in a child process
def test_the_wrong_profile_fails_the_model_naming_the_readings_not_the_node(wrong_run):
    """A reading the model misses is the model's verdict (model_verdict FAIL, named), not the node's:
    the subset run is PARTIAL (-k) whatever the readings say."""
    rc, out, _ = wrong_run
    report = json.loads((out / "report.json").read_text())
    schema.validate(report)
    assert report["model_verdict"] == "FAIL" and set(SEGMENT_READINGS) <= set(report["failed_readings"])
    assert not set(SEGMENT_READINGS) & set(report["failed_targets"])
    assert report["verdict"] != "FAIL" and rc != 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_verdict"] == "FAIL"
    rows = {r["name"]: r for r in report["targets"]}
    for name in SEGMENT_READINGS:
        assert rows[name]["verdict"] == "fail" and rows[name]["kind"] == "reading"
    junit = (out / "junit.xml").read_text()
    for name in SEGMENT_READINGS:
        assert f'name="test_reading[{name}]"' in junit


@pytest.mark.slow  # runs the command or pytest in a child process
def test_summary_and_report_open_with_the_answer(wrong_run):
    _, out, _ = wrong_run
    report = json.loads((out / "report.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    key = next(r for r in report["targets"] if r["name"] == ANSWER_READING)
    for a in (summary["answer"], report["answer"]):
        assert a["ttft_change_pct"] == key["value"] and a["gain"] == (key["value"] < 0)
        assert a["seed_ttft_change_pct"] == key["target"] and a["scenario"]
        # the answer word and its intervals over the ensemble (one member here: the profile itself)
        assert a["answer"] in ("gain", "loss", "undecided") and a["ensemble_members"] >= 1
        lo, hi = a["ttft_change_pct_interval"]
        assert lo <= a["ttft_change_pct"] <= hi and len(a["net_benefit_seconds_interval"]) == 2
        assert len(a["busy_seconds_interval"]) == 2
        readings = [r for r in report["targets"] if r["kind"] == "reading"]
        assert a["readings_total"] == len(readings)
        assert a["readings_outside"] == sum(r["verdict"] == "fail" for r in readings) >= len(SEGMENT_READINGS)
    page = (out / "report.html").read_text()
    assert page.index('id="answer"') < page.index("<h2>Targets</h2>") < page.index("<h2>Readings")
    lo, hi = report["answer"]["ttft_change_pct_interval"]
    assert f"<span class='{report['answer']['answer']}'>{report['answer']['answer']}</span>: TTFT " \
           f"<b>{key['value']:+.2f}%</b> [{lo:+.2f}%, {hi:+.2f}%]" in page
    for k in ("verdict", "ok", "totals", "modules", "skip_reasons", "failures"):  # the keys scripts read, kept
        assert k in summary


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_modeled_pass_is_drawn_apart_from_a_measured_one(wrong_run):
    _, out, _ = wrong_run
    report = json.loads((out / "report.json").read_text())
    rows = {r["name"]: r for r in report["targets"]}
    assert (rows["ghost_entry_bytes"]["basis"], rows["ghost_entry_bytes"]["verdict"]) == ("measured", "pass")
    assert (rows["ghost_entry"]["basis"], rows["ghost_entry"]["verdict"]) == ("modeled", "pass")
    page = (out / "report.html").read_text()
    target = page[page.index('id="target-ghost_entry_bytes"'):]
    reading = page[page.index('id="reading-ghost_entry"'):]
    assert target[:target.index("</tr>")].count('<span class="badge pass">PASS (measured)</span>') == 1
    assert reading[:reading.index("</tr>")].count('<span class="badge pass-modeled">PASS (modeled)</span>') == 1
    fail = page[page.index('id="reading-d2h_submission_inline"'):]
    assert '<span class="badge fail-modeled">FAIL (modeled)</span>' in fail[:fail.index("</tr>")]
    summary = json.loads((out / "summary.json").read_text())
    c = summary["target_counts"]
    assert c["measured_pass"] >= 1 and c["reading_pass"] >= 1 and c["reading_fail"] >= len(SEGMENT_READINGS)


@pytest.mark.slow  # runs the command or pytest in a child process
def test_the_printed_summary_opens_with_the_answer_and_names_failed_readings(wrong_run):
    _, _, printed = wrong_run
    head = next(i for i, line in enumerate(printed) if line.startswith("hicache conform: backend emu, profile "))
    assert re.match(r"answer: (gain|loss|undecided): .* TTFT [-+]\d+\.\d\d% \[[-+]\d+\.\d\d%, [-+]\d+\.\d\d%, 5-95%\]",
                    printed[head + 1]), printed[head + 1]
    assert any(re.match(r"readings \(modeled on the seed scenario, not measured here\): [1-9]\d* PASS \(modeled\), "
                        r"[2-9]\d* FAIL \(modeled\)", line) for line in printed), printed
    for name in SEGMENT_READINGS:
        assert any(line.startswith(f"  FAIL (modeled) reading {name}: model ") for line in printed)
    assert any(line.startswith("targets: 1 measured pass, 0 modeled pass, 0 fail") for line in printed)
