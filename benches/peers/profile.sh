#!/usr/bin/env bash
# Where a paid request's CPU time goes, for tower-x402 and x402-axum side by side:
#   bash benches/peers/profile.sh [--seconds S]
#
# Each app runs alone in its own process, paying through one stub facilitator (`x402-load stub`)
# over loopback HTTP, under wrk (-t2 -c64, every request its own nonce, as the load benchmark
# runs it) after a 2 s warm-up; `perf record -e cpu-clock -g` samples the app for S seconds
# (default 10). The apps run one after the other. Prints, per app, the requests per second
# under the profiler, the CPU time per request, and how it splits by where the samples landed
# (kernel, libc, and each crate of the app); keeps the profiles in target/profile-APP.data for
# `perf report -i`. The rate is wrk's over its whole run, which the profile's window sits in.
#
# Needs perf (Debian's linux-perf) and wrk. Builds x402-load and benches/peers in release mode.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=10
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds S]" >&2; exit 2 ;;
    esac
done

# shellcheck source=benches/peers/apps.sh
source benches/peers/apps.sh

run=0
for app in tower-x402 x402-axum; do
    $(command_of "$app") >"$work/$app.addr" &
    pid=$!
    children+=("$pid")
    url="http://$(address_in "$work/$app.addr")/paid"
    # Every run its own nonces: the stub settles each nonce once.
    run=$((run + 1))
    "$load" script --run "$run" --out "$work/$app.lua" "$url"
    wrk -t2 -c64 -d2s -s "$work/$app.lua" "$url" >/dev/null
    run=$((run + 1))
    "$load" script --run "$run" --out "$work/$app.lua" "$url"
    wrk -t2 -c64 -d"$((seconds + 2))s" -s "$work/$app.lua" "$url" >"$work/$app.wrk" &
    wrk_pid=$!
    sleep 1
    perf record -q -e cpu-clock -F 999 -g -p "$pid" -o "target/profile-$app.data" -- sleep "$seconds" 2>/dev/null
    wait "$wrk_pid"
    kill "$pid"
    rate=$(awk '/Requests\/sec/ { print $2 }' "$work/$app.wrk")
    echo "== $app: $rate requests/s under the profiler"
    perf report -i "target/profile-$app.data" --no-children --sort dso,sym --stdio 2>/dev/null |
        python3 benches/peers/by_crate.py "$rate" "$seconds"
done
