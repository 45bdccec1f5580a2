"""Renders the load benchmark's ratios to the bare route as an SVG bar chart.

Usage: python chart.py RESULTS.tsv [MORE.tsv ...] OUT.svg   (run through chart.sh, which makes
a venv with the pinned matplotlib). Each bar is the median over rounds of a case's requests/s
divided by the bare route's in the same round; one group of bars per implementation.
"""

import csv
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

CASES = ["402", "paid_after", "paid_before"]


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
    impls = sorted({impl for impl, _ in table})
    width = 0.8 / len(impls)
    figure, axes = plt.subplots(figsize=(7, 3.6))
    for index, impl in enumerate(impls):
        xs = [case_index + index * width for case_index in range(len(CASES))]
        heights = [table.get((impl, case), 0.0) for case in CASES]
        bars = axes.bar(xs, heights, width, label=impl)
        axes.bar_label(bars, fmt="%.2f", fontsize=8)
    axes.set_xticks([i + width * (len(impls) - 1) / 2 for i in range(len(CASES))], CASES)
    axes.set_ylabel("requests/s ÷ bare route's (same round)")
    axes.set_yscale("log")
    axes.set_title("Load benchmark: throughput relative to the bare route")
    axes.legend()
    figure.tight_layout()
    figure.savefig(output, metadata={"Date": None})
    print(f"chart: {output}")


if __name__ == "__main__":
    main(sys.argv)
