#!/usr/bin/env bash
# The load benchmark: `bash benches/load/run.sh [--rounds N] [--seconds S] [--warm-up S]
# [--connections C] [--out FILE]`. Installs wrk (and curl) from Debian when missing, builds the
# benchmark in release mode and runs it; see BENCHMARKS.md for what it prints.
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]} from Debian"
    sudo_if_needed=()
    [ "$(id -u)" -eq 0 ] || sudo_if_needed=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_if_needed[@]}" apt-get update -qq
    "${sudo_if_needed[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

exec cargo run --release --quiet -p tower-x402-benches --bin x402-load -- run "$@"
