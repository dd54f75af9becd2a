"""The README and docs/ as a reader meets them: every relative link resolves (file and #anchor), table cells are
short enough to read, the README stays a page, and its tour is the one `make demo` prints (and
tests/integration/test_demo_story.py runs)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.harness.controlplane import REPO_ROOT
from tests.harness.demo import Demo, tour_lines

README = REPO_ROOT / "README.md"
DOCS = [README, *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+).+?\1", re.S)
README_MAX_LINES = 200
CELL_MAX_CHARS = 300
TOUR_MARKER = "<!-- the tour: the commands `make demo` prints (tests/unit/test_docs.py) -->"


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where a [x](y) is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens; inline code, links and emphasis count by their text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file, repeats numbered as GitHub numbers them (x, x-1, x-2)."""
    seen: Counter[str] = Counter()
    found = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line):
            base = slug(m.group(1))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text()))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves_to_a_file_and_anchor(path: Path) -> None:
    broken = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO_ROOT)}")
    assert broken == [], f"{path.relative_to(REPO_ROOT)}: " + "; ".join(broken)


def test_the_link_checker_knows_github_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# `loadline descheduler` — LowNodeLoad\n## The demo's Prometheus\n## Tour\n## Tour\n"
                    "```sh\n# not a heading\n```\n[a](#tour-1) `[b](nowhere.md)`\n")  # fmt: skip
    assert anchors(page) == {"loadline-descheduler--lownodeload", "the-demos-prometheus", "tour", "tour-1"}
    assert links(page) == ["#tour-1"]


def test_every_doc_is_linked_from_the_readme_or_another_doc() -> None:
    linked = {(path.parent / target.partition("#")[0]).resolve() for path in DOCS for target in links(path)}
    orphans = [str(p.relative_to(REPO_ROOT)) for p in DOCS[1:] if p.resolve() not in linked]
    assert orphans == [], f"docs nobody links to: {orphans}"


def test_table_cells_are_short_enough_to_read() -> None:
    long = []
    for path in DOCS:
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())  # keeps line numbers
        for number, line in enumerate(prose.splitlines(), 1):
            if line.startswith("|"):
                long += [f"{path.relative_to(REPO_ROOT)}:{number}: {len(cell)} characters"
                         for cell in line.strip("|").split(" | ") if len(cell.strip()) > CELL_MAX_CHARS]  # fmt: skip
    assert long == [], f"table cells over {CELL_MAX_CHARS} characters (split them into sentences or lists): {long}"


def test_the_readme_is_a_page_and_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert lines[0] == "```sh" and lines[1].startswith("make demo ") and lines[2].startswith("make test ")


def test_the_readme_tour_is_what_make_demo_prints() -> None:
    text = README.read_text()
    assert TOUR_MARKER in text, "README.md lost the tour's marker"
    block = text.split(TOUR_MARKER, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    shown = [line for line in block.splitlines() if line and not line.startswith(("eval ", "make "))]
    state = {"kubeconfig": "kubeconfig", "bin": "bin", "node": "loadline-real-0", "kwok": ["kwok-node-0"]}
    assert shown == tour_lines(Demo(state).tour())
