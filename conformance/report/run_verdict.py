"""The run's verdict: pytest writes junit.xml; this turns it into PASS, FAIL, NOT RUN or PARTIAL
(each target's own pass/fail is conformance.targets.judgment), a per-module table and summary.json.

The junit file is the record (CI systems read it); the table is what a person reads at the
end of `hicache conform`, and summary.json is the same numbers for scripts. Skips are
aggregated by reason, because an unavailable backend skips hundreds of tests for one reason.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "errors", "skipped", "xfailed")
# The suites whose tests need the backend and decide the verdict: a run in which every one of
# their tests was skipped checked nothing about the backend, whatever else passed.
DEFINING_MODULES = ("test_layout_equivalence", "test_bad_input")
VERDICTS = ("PASS", "FAIL", "NOT RUN", "PARTIAL")


@dataclass
class ModuleResult:
    module: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0

    @property
    def tests(self) -> int:
        return sum(getattr(self, o) for o in OUTCOMES)


@dataclass
class Summary:
    backend: str
    profile: str | None
    junit: str
    modules: list[ModuleResult] = field(default_factory=list)
    skip_reasons: dict[str, int] = field(default_factory=dict)
    xfail_reasons: dict[str, int] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)  # {"test", "message"}, "worker_died": True where it died
    unavailable: str | None = None  # why the backend cannot run here, when it cannot
    # tests the run's selection (-k, -m, --deselect) left out, per module (conformance.report.selection);
    # None when the run did not say (a summary read from a junit file alone)
    deselected: dict[str, int] | None = None
    # the suites whose tests must run for a PASS (the storage suite has its own)
    deciding: tuple[str, ...] = DEFINING_MODULES
    # set from the report's rows (conformance.report.document.build): does HiCache pay off on the
    # profile's scenario (conformance.report.answer), and the target counts, modeled apart from measured
    answer: dict | None = None
    target_counts: dict | None = None
    # why pytest ended before its session did (killed, interrupted, its output cut): then the
    # report holds only what ran before, and the verdict cannot be PASS
    stopped: str | None = None

    def total(self, outcome: str) -> int:
        return sum(getattr(m, outcome) for m in self.modules)

    @property
    def tests(self) -> int:
        return sum(m.tests for m in self.modules)

    @property
    def not_run_reason(self) -> str | None:
        """Why nothing that decides the verdict ran, or None when it did."""
        if self.unavailable:
            return f"backend {self.backend!r} is not available here: {self.unavailable}"
        if not self.total("passed"):
            if self.tests:
                return "no test passed: every test was skipped"
            return ("every test was deselected (-k/-m matched none)" if any((self.deselected or {}).values())
                    else "no test ran")
        idle = [m.module for m in self.modules if m.module in self.deciding and m.tests and not m.passed]
        if idle:
            return f"every test of {', '.join(idle)} was skipped"
        cut = any(n for m, n in (self.deselected or {}).items() if m in self.deciding)
        if not cut and not any(m.passed for m in self.modules if m.module in self.deciding):
            # a selection that left them out is PARTIAL (partial_reason); this is "never collected"
            return f"no test of {' or '.join(self.deciding)} ran (not collected)"
        return None

    @property
    def partial_reason(self) -> str | None:
        """Why the deciding suites did not run in full though some of them did (-k or -m left tests
        of theirs out, or one was not collected at all), or None."""
        if self.not_run_reason:
            return None
        ran = {m.module for m in self.modules if m.tests}
        cut = {m: n for m, n in (self.deselected or {}).items() if m in self.deciding and n}
        parts = [f"{n} test{'s' if n != 1 else ''} of {m} deselected" for m, n in sorted(cut.items())]
        parts += [f"{m} did not run" for m in self.deciding if m not in ran and m not in cut]
        if self.stopped:
            parts.append(self.stopped)
        return "; ".join(parts) or None

    @property
    def reading_failures(self) -> list[dict[str, str]]:
        """Failed seed readings: the model's verdict (model_verdict), not the node's."""
        return [f for f in self.failures if is_reading_test(f["test"])]

    @property
    def model_verdict(self) -> str | None:
        """Does the model meet the profile's seed readings: FAIL when one is outside tolerance, PASS
        when all ran within it, NOT RUN when some did not run; None without readings (target_counts)."""
        c = self.target_counts or {}
        total = c.get("reading_pass", 0) + c.get("reading_fail", 0) + c.get("reading_not_measured", 0)
        if not total and not self.reading_failures:
            return None
        if c.get("reading_fail") or self.reading_failures:
            return "FAIL"
        return "NOT RUN" if c.get("reading_not_measured") else "PASS"

    @property
    def verdict(self) -> str:
        """The node's verdict: FAIL on any failure or error (a seed reading the model misses is the
        model's, model_verdict); else NOT RUN when the defining suites did not run; else PARTIAL
        when they ran only in part (a selection left tests out); else PASS."""
        if self.total("failed") + self.total("errors") > len(self.reading_failures):
            return "FAIL"
        if self.not_run_reason:
            return "NOT RUN"
        return "PARTIAL" if self.partial_reason else "PASS"

    @property
    def ok(self) -> bool:
        return self.verdict == "PASS"

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "profile": self.profile,
            "junit": self.junit,
            "ok": self.ok,
            "verdict": self.verdict,
            "not_run_reason": self.not_run_reason if self.verdict == "NOT RUN" else None,
            "partial_reason": self.partial_reason if self.verdict == "PARTIAL" else None,
            "deselected": self.deselected,
            "totals": {"tests": self.tests, **{o: self.total(o) for o in OUTCOMES}},
            "modules": [{**asdict(m), "tests": m.tests} for m in self.modules],
            "skip_reasons": self.skip_reasons,
            "xfail_reasons": self.xfail_reasons,
            "failures": self.failures,
            "answer": self.answer,
            "target_counts": self.target_counts,
            "model_verdict": self.model_verdict,
        }


def is_reading_test(test: str) -> bool:
    """A conform test that checks one seed reading against the model (conformance/suites/test_targets.py)."""
    return test.split("::")[-1].startswith("test_reading[")


def module_of(classname: str) -> str:
    """A junit classname's test module: 'conformance.suites.test_targets' -> 'test_targets', and
    'conformance.suites.test_<what>.TestCase' -> 'test_<what>'."""
    parts = classname.split(".")
    for part in parts:
        if part.startswith("test_"):
            return part
    return parts[-1] or "?"


BODY_NOT_RUN = "hicache_body_not_run"  # a junit property: the test's setup ran, its body did not
BODY_NOT_RUN_REASON = "its body never ran (pytest ran only the setup: --setup-only or --setup-plan)"


def _body_not_run(case) -> bool:
    return any(p.get("name") == BODY_NOT_RUN for p in case.iter("property"))


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


# pytest-xdist's error for a test whose worker process died under it (its name in group 1)
WORKER_DIED = re.compile(r"worker '([^']{1,64})' crashed while running")


def summarize_junit(path: str | Path, backend: str, profile: str | None, unavailable: str | None = None,
                    deselected: dict[str, int] | None = None, deciding: tuple[str, ...] = DEFINING_MODULES) -> Summary:
    """Read pytest's junit XML (with or without xdist) into a Summary; `unavailable` is the
    backend's reason when it cannot run here (the verdict is then NOT RUN); `deselected`: tests
    per module the selection left out (conformance.report.selection.read)."""
    path = Path(path)
    root = ET.parse(path).getroot()
    modules: dict[str, ModuleResult] = {}
    skips: Counter[str] = Counter()
    xfails: Counter[str] = Counter()
    failures = []
    for case in root.iter("testcase"):
        if not case.get("name"):  # xdist's entry for a report of no test (its scheduler failing on a dead worker)
            continue
        mod = module_of(case.get("classname", ""))
        result = modules.setdefault(mod, ModuleResult(mod))
        test = f"{mod}::{case.get('name')}"
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if failure is not None or error is not None:
            bad = failure if failure is not None else error
            message = bad.get("message") or _first_line(bad.text)
            if (died := WORKER_DIED.search(message)) is not None:
                # xdist files it as a setup error; the test was running, and it did not pass
                result.failed += 1
                failures.append({"test": test, "worker_died": True, "message": (
                    f"its pytest worker {died.group(1)} died while running it, with no report of its own "
                    "(killed: most likely by the OOM killer)")})
                continue
            if failure is not None:
                result.failed += 1
            else:
                result.errors += 1
            failures.append({"test": test, "message": message})
        elif skipped is not None:
            reason = skipped.get("message") or _first_line(skipped.text) or "no reason given"
            if skipped.get("type") == "pytest.xfail":
                result.xfailed += 1
                xfails[reason] += 1
            else:
                result.skipped += 1
                skips[reason] += 1
        elif _body_not_run(case):  # nothing of it was checked: not run, never passed
            result.skipped += 1
            skips[BODY_NOT_RUN_REASON] += 1
        else:
            result.passed += 1
    return Summary(backend, profile, str(path), [modules[m] for m in sorted(modules)],
                   dict(skips.most_common()), dict(xfails.most_common()), failures, unavailable, deselected, deciding)


def format_table(s: Summary, max_failures: int = 20) -> str:
    width = max([len("module"), len("total"), *(len(m.module) for m in s.modules)])
    lines = [f"hicache conform: backend {s.backend}, profile {s.profile or 'none'}"]
    if s.answer:  # the report opens with what the harness exists to say
        lines.append(f"answer: {s.answer['text']}")
    # A seed reading the model misses is the model's section below, not a failed test of the node.
    readings = s.reading_failures
    node_failures = [f for f in s.failures if not is_reading_test(f["test"])]
    missed = Counter(f["test"].partition("::")[0] for f in readings)
    cols = ("tests", *OUTCOMES, *(("model",) if readings else ()))  # model: its readings outside tolerance
    head = f"{'module':<{width}}  " + "  ".join(f"{c:>7}" for c in cols)
    lines += [head, "-" * len(head)]

    def row(name: str, counts: dict, model: int) -> str:
        shown = {**counts, "failed": counts["failed"] - model, "model": model}
        return f"{name:<{width}}  " + "  ".join(f"{shown[c]:>7}" for c in cols)

    for m in s.modules:
        lines.append(row(m.module, {c: getattr(m, c) for c in ("tests", *OUTCOMES)}, missed[m.module]))
    lines.append("-" * len(head))
    lines.append(row("total", {"tests": s.tests, **{o: s.total(o) for o in OUTCOMES}}, len(readings)))
    if readings:
        lines.append(f"the model: {len(readings)} seed readings outside tolerance (the model's verdict, "
                     "not a failed check of the node):")
        lines.extend(f"  {f['test'].rpartition('::')[2]}: {_first_line(f['message'])[:300]}"
                     for f in readings[:max_failures])
    for title, reasons in (("skipped", s.skip_reasons), ("expected failures", s.xfail_reasons)):
        if reasons:
            lines.append(f"{title}:")
            lines.extend(f"  {n:>5} x {reason}" for reason, n in reasons.items())
    if node_failures:
        lines.append(f"failed ({len(node_failures)}):")
        lines.extend(f"  {f['test']}: {f['message'][:300]}" for f in node_failures[:max_failures])
        if len(node_failures) > max_failures:
            lines.append(f"  ... and {len(node_failures) - max_failures} more in {s.junit}")
    missed = len(s.reading_failures)
    counts = (f"{s.total('passed')} passed, {s.total('failed') + s.total('errors') - missed} failed, "
              + (f"{missed} seed readings outside tolerance, " if missed else "")
              + f"{s.total('skipped')} skipped of {s.tests}")
    if s.verdict == "NOT RUN":
        lines.append(f"NOT RUN: {s.not_run_reason} ({counts})")
    elif s.verdict == "PARTIAL":
        lines.append(f"PARTIAL: the deciding suites did not run in full ({s.partial_reason}); no check of the node "
                     f"failed, but nothing is signed off ({counts})")
    else:
        lines.append(f"{s.verdict}: {counts}" + (f"; {s.stopped}" if s.stopped and s.verdict == "FAIL" else ""))
    mv = s.model_verdict
    if mv is not None:  # the model's own verdict: it decides nothing about this node
        c = s.target_counts or {}
        lines.append(f"model {mv}: {c.get('reading_pass', 0)} of the profile's seed readings within tolerance, "
                     f"{c.get('reading_fail', len(s.reading_failures))} outside, {c.get('reading_not_measured', 0)} "
                     "not measured (modeled on the seed scenario; the verdict above is the node's)")
    return "\n".join(lines)


def write_json(s: Summary, path: str | Path) -> None:
    """summary.json, replaced atomically: a reader sees the old file or the new one, never half."""
    from conformance.common.safe_write import write_text

    write_text(Path(path), json.dumps(s.to_json(), indent=2) + "\n")
