"""Rendering, drift check and the command line behind `python -m common.api.crdgen [--check] [OUTDIR]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from common.api.crdgen.crds import CRD, all_crds
from common.api.crdgen.schema import DEFAULT_OUTDIR, HEADER

# --------------------------------------------------------------------------------------------------
# Rendering and CLI
# --------------------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """SafeDumper that indents sequences under their key, like kubectl/controller-gen output."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def render(crd: CRD) -> str:
    body = yaml.dump(
        crd.render(),
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
    )
    return HEADER + "---\n" + body


def render_all() -> dict[str, str]:
    return {crd.filename: render(crd) for crd in all_crds()}


def _generated_files(outdir: Path) -> set[str]:
    """Names of files in outdir that carry our header (so may be removed/flagged when stale)."""
    found: set[str] = set()
    if not outdir.is_dir():
        return found
    for path in outdir.glob("*.yaml"):
        with path.open(encoding="utf-8") as fh:
            if fh.readline() == HEADER:
                found.add(path.name)
    return found


def check(outdir: Path, rendered: Mapping[str, str] | None = None) -> list[str]:
    """Return one line per out-of-date file in outdir; empty when everything matches."""
    rendered = render_all() if rendered is None else rendered
    problems: list[str] = []
    for name, text in sorted(rendered.items()):
        path = outdir / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs")
    for name in sorted(_generated_files(outdir) - set(rendered)):
        problems.append(f"{outdir / name}: stale (no longer generated)")
    return problems


def write(outdir: Path, rendered: Mapping[str, str] | None = None) -> list[str]:
    """Write changed files and remove stale generated ones; return one line per action."""
    rendered = render_all() if rendered is None else rendered
    outdir.mkdir(parents=True, exist_ok=True)
    actions: list[str] = []
    for name, text in sorted(rendered.items()):
        path = outdir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            actions.append(f"wrote {path}")
    for name in sorted(_generated_files(outdir) - set(rendered)):
        (outdir / name).unlink()
        actions.append(f"removed stale {outdir / name}")
    return actions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m common.api.crdgen", description="Generate Loadline's CRDs into deploy/crds."
    )
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 listing files that differ")
    parser.add_argument("outdir", nargs="?", type=Path, default=DEFAULT_OUTDIR, help="default: deploy/crds")
    args = parser.parse_args(argv)
    outdir: Path = args.outdir
    if args.check:
        problems = check(outdir)
        for line in problems:
            print(line)
        if problems:
            print("CRDs are out of date; run: python -m common.api.crdgen", file=sys.stderr)
            return 1
        return 0
    for line in write(outdir):
        print(line)
    return 0
