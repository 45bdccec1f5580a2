"""Renders the load benchmark's ratios to the bare route as an SVG bar chart.

Usage: python chart.py RESULTS.tsv [MORE.tsv ...] OUT.svg   (run through chart.sh, which makes
a venv with the pinned matplotlib). Each bar is the median over rounds of one app's case: its
requests/s divided by the bare route's of the same process in the same round. One row per app
and case, grouped by case, coloured by app.
"""

import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

# The cases drawn, top to bottom, and how the chart names them.
CASES = {
    "bare_402": "its 402's bytes from a plain handler",
    "402": "unpaid → 402",
    "x402.json": "/.well-known/x402.json",
    "paid_after": "paid, settle after handler",
    "paid_before": "paid, settle before handler",
    "paid": "paid, settle after handler",
}


def medians(paths):
    ratios = defaultdict(list)
    for path in paths:
        with open(path, newline="") as file:
            for row in csv.DictReader(file, delimiter="\t"):
                ratios[(row["impl"], row["case"])].append(float(row["ratio"]))
    return {key: statistics.median(values) for key, values in ratios.items()}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    *inputs, output = argv[1:]
    table = medians(inputs)
    impls = list(dict.fromkeys(impl for impl, _ in table))
    colours = dict(zip(impls, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    rows = [
        (impl, case)
        for case in CASES
        for impl in impls
        if (impl, case) in table
    ]
    figure, axes = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.2))
    ys = range(len(rows))
    values = [table[row] for row in rows]
    bars = axes.barh(ys, values, color=[colours[impl] for impl, _ in rows])
    axes.bar_label(bars, fmt="%.3g", fontsize=8, padding=2)
    axes.set_yticks(ys, [f"{impl}: {CASES[case]}" for impl, case in rows], fontsize=8)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.axvline(1.0, color="grey", linewidth=0.8)
    axes.set_xlabel("requests/s ÷ the same process's bare route (same round)")
    axes.set_title("Load benchmark: throughput relative to the bare route")
    figure.tight_layout()
    figure.savefig(output, metadata={"Date": None})
    print(f"chart: {output}")


if __name__ == "__main__":
    main(sys.argv)
