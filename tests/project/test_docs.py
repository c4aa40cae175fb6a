"""The docs a newcomer reads stay short, runnable and linked: README sentences, its `hicache` examples, every doc's relative links."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def markdown_files() -> list[Path]:
    """Every Markdown file of the checkout; hidden folders and virtual environments are not walked into."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "venv"))]
        found += [Path(folder, name) for name in files if name.endswith(".md")]
    return sorted(found)


DOCS = markdown_files()
MAX_MEAN_WORDS = 25

# README examples known not to parse yet, each with the reason (strict xfail: one that starts to
# parse fails the run until its entry goes). Any other example that stops parsing fails outright.
PENDING_EXAMPLES: dict[str, str] = {}
# Files the docs link to that do not exist yet, each with the reason (strict, as above).
PENDING_FILES: dict[str, str] = {}

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose_sentences(markdown: str) -> list[str]:
    """The sentences of the prose: fenced code, headings and table rows dropped; each list item
    and each paragraph is split at '.', '!' or '?' followed by white space (or its end), so a
    list item always ends a sentence. Inline code counts as words."""
    text = FENCE.sub("", markdown)
    blocks, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        starts_item = re.match(r"^([-*+]|\d+\.)\s", stripped)
        if not stripped or stripped.startswith(("#", "|", ">")) or starts_item:
            if current:
                blocks.append(" ".join(current))
            current = []
            if starts_item:
                current = [stripped[starts_item.end():]]
            continue
        current.append(stripped)
    if current:
        blocks.append(" ".join(current))
    sentences = []
    for block in blocks:
        sentences += [s for s in re.split(r"(?<=[.!?])\s+", block) if re.search(r"\w", s)]
    return sentences


def words(sentence: str) -> int:
    return sum(1 for w in sentence.split() if re.search(r"\w", w))


def test_readme_sentences_average_under_25_words():
    sentences = prose_sentences(README.read_text(encoding="utf-8"))
    mean = sum(map(words, sentences)) / len(sentences)
    longest = max(sentences, key=words)
    assert mean < MAX_MEAN_WORDS, (f"README: {mean:.1f} words per sentence on average over {len(sentences)} "
                                   f"sentences; the longest ({words(longest)} words): {longest}")


def test_sentence_split_counts_list_items_and_skips_code():
    text = "# Title\n\nOne two three. Four five\nsix.\n\n- an item; without a stop\n- next\n\n```\nnot. prose.\n```\n"
    assert prose_sentences(text) == ["One two three.", "Four five six.", "an item; without a stop", "next"]


def readme_examples() -> list[str]:
    """Every `hicache ...` command in README's fenced blocks, one per command (after `&&`, `;` or
    `|` as well as at a line's start), without comments or redirections."""
    found = []
    for block in FENCE.findall(README.read_text(encoding="utf-8")):
        for line in block.splitlines()[1:-1]:
            line = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            for part in re.split(r"&&|;|\|", line):
                part = re.split(r"\s[0-9]?>", part, maxsplit=1)[0].strip()
                if part.startswith("hicache "):
                    found.append(part)
    return found


def _example_params():
    return [pytest.param(ex, id=ex, marks=[pytest.mark.xfail(strict=True, reason=PENDING_EXAMPLES[ex])]
                         if ex in PENDING_EXAMPLES else []) for ex in readme_examples()]


def test_readme_has_an_example_per_main_task():
    commands = {shlex.split(ex)[1] for ex in readme_examples()}
    assert {"conform", "doctor", "calibrate", "replay", "sweep", "ablate"} <= commands
    assert set(PENDING_EXAMPLES) <= set(readme_examples()), "a pending example left README: drop its entry"


@pytest.mark.parametrize("example", _example_params())
def test_readme_example_parses(example):
    """Each example parses with the `hicache` parsers as they stand (nothing runs)."""
    from conformance.cli.main import build_parser

    argv = shlex.split(example)[1:]
    args = build_parser(argv).parse_args(argv)
    assert args.command == argv[0]


def relative_links() -> list[tuple[Path, str]]:
    out = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same file
            out.append((doc, target.split("#", 1)[0]))
    return out


def _link_params():
    params = []
    for doc, target in relative_links():
        resolved = (doc.parent / target).resolve()
        rel = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
        marks = [pytest.mark.xfail(strict=True, reason=PENDING_FILES[rel])] if rel in PENDING_FILES else []
        params.append(pytest.param(doc, target, id=f"{doc.relative_to(ROOT)}->{target}", marks=marks))
    return params


@pytest.mark.parametrize(("doc", "target"), _link_params())
def test_relative_link_points_to_a_file(doc, target):
    assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: link to {target}, which does not exist"


README_MAX_LINES = 159


def test_the_readme_fits_a_screenful_or_two():
    """Detail goes to docs/ (engines.md, cli.md, ...); the README stays a page a newcomer reads whole."""
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to a page of docs/"
