"""Plot `bench/scheduler_inprocess_bench.py`'s figures: pods/s vs nodes, as a small hand-written SVG.

    .venv/bin/python bench/plot_scheduler_inprocess.py [--input FILE] [--output bench/results/scheduler_inprocess.svg]
                                                       [-- <arguments for scheduler_inprocess_bench.py>]

With `--input`, reads that bench's saved stdout; otherwise runs the bench (passing on the arguments
after `--`) and saves its output next to the SVG (`scheduler_inprocess.txt`). One line per
percentageOfNodesToScore setting, pods/s per CPU second (the bench's target figure) and per wall
second (dashed), log-scaled node axis; the issue-4 targets are drawn as markers. No dependencies.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "scheduler_inprocess_bench.py"
RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {1000: 2000.0, 5000: 680.0}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")

Row = tuple[int, str, float, float]  # nodes, percentage, pods/s wall, pods/s cpu


def parse(text: str) -> list[Row]:
    rows: list[Row] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].isdigit() and parts[2].isdigit():
            rows.append((int(parts[0]), parts[1], float(parts[3]), float(parts[4])))
    return rows


def svg(rows: list[Row], title: str) -> str:
    width, height, left, right, top, bottom = 560, 340, 70, 150, 40, 50
    nodes = sorted({r[0] for r in rows})
    y_max = max([r[2] for r in rows] + [r[3] for r in rows] + list(TARGETS.values())) * 1.1
    x_lo, x_hi = math.log10(min(nodes)), math.log10(max(nodes))
    span = (x_hi - x_lo) or 1.0

    def x(n: float) -> float:
        return left + (math.log10(n) - x_lo) / span * (width - left - right)

    def y(v: float) -> float:
        return height - bottom - v / y_max * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2 - right / 2:.0f}" y="20" text-anchor="middle" font-size="13">{title}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>',
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 12}" text-anchor="middle">nodes (log scale)</text>',
        f'<text x="16" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2:.0f})">pods/s</text>',
    ]
    step = 10 ** math.floor(math.log10(y_max / 4))
    step *= 5 if y_max / step > 20 else 2 if y_max / step > 8 else 1
    tick = 0.0
    while tick <= y_max:
        out.append(f'<line x1="{left - 4}" y1="{y(tick):.1f}" x2="{width - right}" y2="{y(tick):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.0f}</text>')
        tick += step
    for n in nodes:
        out.append(f'<text x="{x(n):.1f}" y="{height - bottom + 16}" text-anchor="middle">{n:,}</text>')
    legend_y = top + 10
    for i, percentage in enumerate(dict.fromkeys(r[1] for r in rows)):
        colour = COLOURS[i % len(COLOURS)]
        series = sorted(r for r in rows if r[1] == percentage)
        for column, dash, label in ((3, "", "per CPU s"), (2, ' stroke-dasharray="5 3"', "per wall s")):
            points = " ".join(f"{x(r[0]):.1f},{y(float(r[column])):.1f}" for r in series)
            out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
            out.extend(
                f'<circle cx="{x(r[0]):.1f}" cy="{y(float(r[column])):.1f}" r="3" fill="{colour}"/>' for r in series
            )
            lx = width - right + 10
            out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 20}" y2="{legend_y}" stroke="{colour}" '
                       f'stroke-width="2"{dash}/>')  # fmt: skip
            out.append(f'<text x="{lx + 25}" y="{legend_y + 4}">pct {percentage}, {label}</text>')
            legend_y += 16
    for n, target in TARGETS.items():
        if min(nodes) <= n <= max(nodes):
            out.append(f'<path d="M{x(n) - 6:.1f},{y(target):.1f} h12" stroke="black" stroke-width="2"/>')
            out.append(f'<text x="{x(n) + 8:.1f}" y="{y(target) + 4:.1f}">target {target:.0f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> int:
    argv = sys.argv[1:]
    passthrough = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, help="saved stdout of scheduler_inprocess_bench.py")
    parser.add_argument("--output", type=Path, default=RESULTS / "scheduler_inprocess.svg")
    args = parser.parse_args(own)
    if args.input:
        text = args.input.read_text()
    else:
        proc = subprocess.run([sys.executable, str(BENCH), *passthrough], capture_output=True, text=True, check=True)
        text = proc.stdout
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.with_suffix(".txt").write_text(text)
    rows = parse(text)
    if not rows:
        print("no figures found in the bench's output", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(svg(rows, "Loadline scheduler, in process: pods/s vs nodes"))
    print(f"wrote {args.output} ({len(rows)} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
