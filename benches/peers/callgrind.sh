#!/usr/bin/env bash
# Deterministic counts of whole requests over loopback HTTP, for tower-x402 and the peers:
#   bash benches/peers/callgrind.sh [--requests N] [--seconds S] [--apps NAME,...]
#   bash benches/peers/callgrind.sh --cache-sim [--warm-up N] [--requests N] [--apps NAME,...]
#
# For each app (tower-x402, x402-axum, r402, and x402-axum paying through an in-process
# facilitator that answers at once), every paid request with its own nonce, all paying through
# one stub facilitator (`x402-load stub`) over loopback HTTP:
#
# - instructions: the app runs under valgrind's callgrind with instrumentation off; after a
#   warm-up, curl sends exactly N requests one after another on one kept-alive connection
#   (`x402-load curl` writes them) with instrumentation on; the row is the app's instructions
#   (`Ir`, every thread) divided by N, for `/bare` and for the paid route.
# - kernel side: the app runs natively under wrk (-t2 -c64, as the load benchmark) for S
#   seconds; context switches are summed over /proc/PID/task/*/status (voluntary and
#   nonvoluntary) before and after, and syscalls are counted by `strace -c -f` attached during a
#   second run of S seconds. Both are divided by the requests wrk completed.
#
# With --cache-sim, the counts come from callgrind's cache simulation instead (the machine's
# cache sizes), for the paid route only, after N paid requests of warm-up (default 11,000, so that
# tower-x402's memory ledger is full and evicting, as under load): per paid request, the
# instructions, the misses of the first-level instruction and data caches (`I1mr`, `D1mr`
# reads, `D1mw` writes) and of the last level (`LLmr`, `LLmw`), then the ten callers whose
# `memcpy` misses the first-level data cache most on writes (copies into memory not in cache:
# a future moved into a fresh box, a buffer grown). No kernel side then. The dumps stay in
# target/peers-cache-APP.out for `callgrind_annotate`.
#
# Needs valgrind, strace, wrk and curl. Builds x402-load and benches/peers in release mode.
set -euo pipefail
cd "$(dirname "$0")/../.."

requests=200
seconds=3
apps=""
cache_sim=""
warm_up=11000
while [ $# -gt 0 ]; do
    case "$1" in
    --requests) requests=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --apps) apps=$2; shift 2 ;;
    --cache-sim) cache_sim=1; shift ;;
    --warm-up) warm_up=$2; shift 2 ;;
    *) echo "usage: $0 [--cache-sim] [--warm-up N] [--requests N] [--seconds S] [--apps NAME,...]" >&2; exit 2 ;;
    esac
done
if [ -z "$apps" ]; then
    apps="tower-x402,x402-axum,r402,x402-axum-instant"
    [ -z "$cache_sim" ] || apps="tower-x402,x402-axum"
fi

# shellcheck source=benches/peers/apps.sh
source benches/peers/apps.sh

paid_path_of() {
    case "$1" in
    tower-x402) echo /paid/after ;;
    *) echo /paid ;;
    esac
}

run=0
next_run() { run=$((run + 1)); }

# Starts APP under callgrind with instrumentation off (and any further valgrind options): its
# process in `pid`, its address in `address`.
start_under_callgrind() {
    local app=$1
    shift
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --instr-atstart=no "$@" \
        --callgrind-out-file="$work/callgrind.out.%p" $(command_of "$app") \
        >"$work/$app.addr" 2>"$work/$app.valgrind" &
    pid=$!
    children+=("$pid")
    address=$(address_in "$work/$app.addr")
}

# Sends the requests in curl config FILE to the app PID with instrumentation on, and prints the
# path of the dump holding the counts of those requests alone.
measured_dump() {
    local pid=$1 config=$2
    callgrind_control --zero "$pid" >/dev/null
    callgrind_control --instr=on "$pid" >/dev/null
    curl --silent --fail --config "$config"
    callgrind_control --instr=off "$pid" >/dev/null
    callgrind_control --dump="measured" "$pid" >/dev/null
    # The newest dump of this process holds the counts since --zero.
    ls -t "$work"/callgrind.out."$pid".* | head -n1
}

# Instructions of the app PID for the requests in curl config FILE, divided by COUNT.
instructions_per_request() {
    local dump total
    dump=$(measured_dump "$1" "$2")
    total=$(awk '/^totals:/ {print $2}' "$dump")
    echo $((total / $3))
}

if [ -n "$cache_sim" ]; then
    printf '%-18s %10s %8s %8s %8s %8s %8s\n' app Ir I1mr D1mr D1mw LLmr LLmw
    IFS=',' read -r -a app_list <<<"$apps"
    for app in "${app_list[@]}"; do
        start_under_callgrind "$app" --cache-sim=yes
        url="http://$address$(paid_path_of "$app")"
        next_run
        "$load" curl "$url" --count "$warm_up" --run "$run" --out "$work/warm.curl"
        curl --silent --fail --config "$work/warm.curl"
        next_run
        "$load" curl "$url" --count "$requests" --run "$run" --out "$work/measured.curl"
        dump=$(measured_dump "$pid" "$work/measured.curl")
        cp "$dump" "target/peers-cache-$app.out"
        awk -v app="$app" -v n="$requests" '
            /^events:/ { for (i = 2; i <= NF; i++) column[$i] = i }
            /^totals:/ {
                printf "%-18s %10.0f %8.0f %8.0f %8.0f %8.0f %8.0f\n", app,
                    $column["Ir"] / n, $column["I1mr"] / n, $column["D1mr"] / n, $column["D1mw"] / n,
                    ($column["ILmr"] + $column["DLmr"]) / n, $column["DLmw"] / n
            }' "$dump"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
    for app in "${app_list[@]}"; do
        echo
        echo "$app: memcpy's first-level write misses per paid request, by caller"
        callgrind_annotate --tree=caller --show=D1mw --sort=D1mw "target/peers-cache-$app.out" 2>/dev/null |
            python3 benches/peers/memcpy_callers.py "$requests"
    done
    exit 0
fi

printf '%-18s %-6s %14s %14s %14s\n' app case "Ir/request" "syscalls/req" "ctxt sw/req"
results=()
IFS=',' read -r -a app_list <<<"$apps"
for app in "${app_list[@]}"; do
    path=$(paid_path_of "$app")
    start_under_callgrind "$app"
    for case in bare paid; do
        url="http://$address/bare"
        unpaid=(--unpaid)
        if [ "$case" = paid ]; then url="http://$address$path"; unpaid=(); fi
        next_run
        "$load" curl "$url" --count 20 --run "$run" "${unpaid[@]}" --out "$work/warm.curl"
        curl --silent --fail --config "$work/warm.curl"
        next_run
        "$load" curl "$url" --count "$requests" --run "$run" "${unpaid[@]}" --out "$work/measured.curl"
        ir=$(instructions_per_request "$pid" "$work/measured.curl" "$requests")
        results+=("$app $case $ir")
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true

    # The kernel side, natively.
    # shellcheck disable=SC2046
    $(command_of "$app") >"$work/$app.native.addr" &
    pid=$!
    children+=("$pid")
    address=$(address_in "$work/$app.native.addr")
    for case in bare paid; do
        url="http://$address/bare"
        script=()
        if [ "$case" = paid ]; then
            url="http://$address$path"
            next_run
            "$load" script "$url" --run "$run" --out "$work/warm.lua"
            script=(-s "$work/warm.lua")
        fi
        wrk -t2 -c64 -d1s "${script[@]}" "$url" >/dev/null
        switches() {
            cat /proc/"$pid"/task/*/status 2>/dev/null |
                awk '/ctxt_switches/ {sum += $2} END {print sum}'
        }
        if [ "$case" = paid ]; then
            next_run
            "$load" script "$url" --run "$run" --out "$work/measured.lua"
            script=(-s "$work/measured.lua")
        fi
        before=$(switches)
        done_requests=$(wrk -t2 -c64 -d"${seconds}s" "${script[@]}" "$url" |
            awk '/requests in/ {print $1}')
        after=$(switches)
        ctxt=$(awk -v a="$after" -v b="$before" -v n="$done_requests" 'BEGIN {printf "%.2f", (a - b) / n}')
        if [ "$case" = paid ]; then
            next_run
            "$load" script "$url" --run "$run" --out "$work/measured.lua"
        fi
        strace -c -f -q -p "$pid" -o "$work/$app.$case.strace" &
        tracer=$!
        sleep 0.5
        traced_requests=$(wrk -t2 -c64 -d"${seconds}s" "${script[@]}" "$url" |
            awk '/requests in/ {print $1}')
        kill -INT "$tracer"
        wait "$tracer" 2>/dev/null || true
        calls=$(awk '$NF == "total" {print $4}' "$work/$app.$case.strace")
        syscalls=$(awk -v c="$calls" -v n="$traced_requests" 'BEGIN {printf "%.2f", c / n}')
        for i in "${!results[@]}"; do
            read -r a c ir <<<"${results[$i]}"
            if [ "$a" = "$app" ] && [ "$c" = "$case" ]; then
                printf '%-18s %-6s %14s %14s %14s\n' "$app" "$case" "$ir" "$syscalls" "$ctxt"
                cp "$work/$app.$case.strace" "target/peers-$app-$case.strace" 2>/dev/null || true
            fi
        done
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
