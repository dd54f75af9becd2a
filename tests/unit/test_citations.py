"""Comments and docstrings cite files that exist: ours by their path in the repository (a `.md` named in
the code is there), upstream ones by their path upstream. Notes outside the repository (a "reference §x")
are no citation: a reader of the repository cannot open them."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("agent", "manager", "scheduler_plugin", "common", "bench", "tests", "deploy")
MARKDOWN = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
OUTSIDE = re.compile(r"reference §|reference/koordinator|koordinator\.md §|node-metrics §|scheduling\.md §")
THIS_FILE = Path(__file__).resolve()


def _sources(tops: tuple[str, ...] = SOURCES) -> list[Path]:
    files: list[Path] = []
    for top in tops:
        files += [p for p in (REPO / top).rglob("*") if p.suffix in (".py", ".yaml", ".tpl") and p.is_file()]
    return sorted(p for p in files if p.resolve() != THIS_FILE)


def test_cited_markdown_files_exist() -> None:
    missing = []
    for path in _sources(tuple(top for top in SOURCES if top != "tests")):  # tests hold made-up pages as data
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for cited in MARKDOWN.findall(line):
                if not any((base / cited).exists() for base in (REPO, REPO / "docs", path.parent)):
                    missing.append(f"{path.relative_to(REPO)}:{n}: {cited}")
    assert missing == []


def test_no_citation_of_notes_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in _sources()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_the_checks_find_what_they_look_for() -> None:
    assert MARKDOWN.findall("see docs/nowhere.md and README.md.") == ["docs/nowhere.md", "README.md"]
    assert OUTSIDE.search("Koordinator's rule (reference §5.3)")
