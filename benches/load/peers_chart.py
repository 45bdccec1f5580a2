"""Renders the peers side by side from a load benchmark's TSV, as an SVG with no dependency.

Usage: python3 benches/load/peers_chart.py RESULTS.tsv OUT.svg

Three panels, one bar per app, each the median over the run's rounds: paid requests per second,
the app's CPU per paid request (both facilitator calls included, the stub facilitator's own CPU
not), and the 402's throughput as a ratio to the same process's bare route in the same round.
Only the python standard library: the chart is re-rendered wherever the harness runs.
"""

import csv
import statistics
import sys
from collections import defaultdict
from html import escape

# (app in the TSV, its paid case, its 402 case, label, colour), top to bottom.
APPS = [
    ("tower-x402-process", "paid", "402", "tower-x402 exact, settled after (own process)", "#1f6feb"),
    ("tower-x402-process", "paid_before", None, "tower-x402 exact, settled first (own process)", "#58a6ff"),
    ("tower-x402-channel", "paid_channel", None, "tower-x402 channel voucher", "#2da44e"),
    ("x402-axum", "paid", "402", "x402-axum 2.0.2", "#bf8700"),
    ("r402", "paid", "402", "r402-http 0.21.0", "#cf222e"),
]

PANELS = [
    ("paid requests/s", "req_per_s", "paid", "{:,.0f}"),
    ("app CPU µs per paid request", "app_cpu_us", "paid", "{:.1f}"),
    ("402 ÷ bare route (same round)", "ratio", "402", "{:.3f}"),
]


def medians(path):
    values = defaultdict(list)
    with open(path, newline="") as file:
        for row in csv.DictReader(file, delimiter="\t"):
            for column in ("req_per_s", "app_cpu_us", "ratio"):
                try:
                    values[(row["impl"], row["case"], column)].append(float(row[column]))
                except ValueError:
                    pass
    return {key: statistics.median(found) for key, found in values.items()}


def render(table, title):
    label_width, panel_width, gap, bar_height, row_gap = 220, 230, 30, 16, 6
    rows = len(APPS)
    top = 48
    height = top + rows * (bar_height + row_gap) + 28
    width = label_width + len(PANELS) * (panel_width + gap)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    for index, (_, _, _, label, _) in enumerate(APPS):
        y = top + index * (bar_height + row_gap) + bar_height - 4
        out.append(f'<text x="8" y="{y}">{escape(label)}</text>')
    for number, (name, column, kind, fmt) in enumerate(PANELS):
        x0 = label_width + number * (panel_width + gap)
        out.append(f'<text x="{x0}" y="{top - 10}" font-weight="bold">{escape(name)}</text>')
        found = []
        for app, paid, challenge, _, colour in APPS:
            case = paid if kind == "paid" else challenge
            found.append((table.get((app, case, column)) if case else None, colour))
        scale = max((value for value, _ in found if value is not None), default=1.0)
        if column == "ratio":
            scale = max(scale, 1.0)
        usable = panel_width - 60
        for index, (value, colour) in enumerate(found):
            y = top + index * (bar_height + row_gap)
            if value is None:
                out.append(f'<text x="{x0}" y="{y + bar_height - 4}" fill="#888">–</text>')
                continue
            length = max(1.0, usable * value / scale)
            out.append(
                f'<rect x="{x0}" y="{y}" width="{length:.1f}" height="{bar_height}" fill="{colour}"/>'
            )
            out.append(
                f'<text x="{x0 + length + 4:.1f}" y="{y + bar_height - 4}">{fmt.format(value)}</text>'
            )
        if column == "ratio":
            x = x0 + usable / scale
            bottom = top + rows * (bar_height + row_gap)
            out.append(
                f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#555" '
                'stroke-dasharray="3,2"/>'
            )
    out.append(
        f'<text x="8" y="{height - 8}" fill="#555">medians over the rounds of one run; '
        "a 2-core machine shared with wrk, the apps and the stub facilitator</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    source, output = argv[1], argv[2]
    svg = render(medians(source), f"Load benchmark, peers side by side ({source.rsplit('/', 1)[-1]})")
    with open(output, "w", encoding="utf-8") as file:
        file.write(svg)
    print(f"chart: {output}")


if __name__ == "__main__":
    main(sys.argv)
