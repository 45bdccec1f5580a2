#!/usr/bin/env bash
# Renders the load benchmark's chart of ratios to the bare route from its results:
# `bash benches/load/chart.sh [RESULTS.tsv ...]` (default target/load-bench/results.tsv) writes
# benches/load/ratios.svg. Makes a venv under target/ with the pinned matplotlib.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/chart-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "matplotlib==3.9.2"
fi
if [ "$#" -eq 0 ]; then
    set -- target/load-bench/results.tsv
fi
"$venv/bin/python" benches/load/chart.py "$@" benches/load/ratios.svg
