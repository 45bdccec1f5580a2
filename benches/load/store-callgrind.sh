#!/usr/bin/env bash
# The store's 402 and its bare route counted, deterministically:
#   bash benches/load/store-callgrind.sh [--requests N] [--annotate DIR]
#
# The example store in demo mode (`x402-load store`, as the load benchmark serves it) runs under
# valgrind's callgrind with instrumentation off. For each route — one SKU's paid route asked
# unpaid (the 402) and `/bazaar/style.css` (the store's bare route, through the same stack) —
# curl sends 20 warm-up requests, then exactly N requests one after another on one kept-alive
# connection with instrumentation on (`callgrind_control`); the row is the process's
# instructions (`Ir`, every thread) divided by N. With --annotate, each route's dump is kept in
# DIR for `callgrind_annotate --inclusive=yes DIR/402` (and `DIR/bare`).
#
# Needs valgrind and curl. Builds x402-load in release mode.
set -euo pipefail
cd "$(dirname "$0")/../.."

requests=100
annotate=""
while [ $# -gt 0 ]; do
    case "$1" in
    --requests) requests=$2; shift 2 ;;
    --annotate) annotate=$2; shift 2 ;;
    *) echo "usage: $0 [--requests N] [--annotate DIR]" >&2; exit 2 ;;
    esac
done

cargo build --release --quiet -p tower-x402-benches --bin x402-load
load="${CARGO_TARGET_DIR:-target}/release/x402-load"

work=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The file exists before the store writes to it, so the wait below can read it at once.
: >"$work/store.addr"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out.%p" \
    "$load" store >"$work/store.addr" 2>"$work/valgrind.log" &
pid=$!
# The store prints its address, then one SKU's paid route.
for _ in $(seq 1 600); do
    [ "$(wc -l <"$work/store.addr")" -ge 2 ] && break
    sleep 0.1
done
address=$(sed -n 1p "$work/store.addr")
sku=$(sed -n 2p "$work/store.addr")
if [ -z "$sku" ]; then
    echo "the store did not start" >&2
    cat "$work/valgrind.log" >&2
    exit 1
fi

printf '%-6s %-32s %12s\n' case path "Ir/request"
for case in 402 bare; do
    path=$sku
    [ "$case" = bare ] && path=/bazaar/style.css
    url="http://$address$path"
    "$load" curl "$url" --count 20 --run 1 --unpaid --out "$work/warm.curl"
    curl --silent --config "$work/warm.curl"
    "$load" curl "$url" --count "$requests" --run 2 --unpaid --out "$work/measured.curl"
    callgrind_control --zero "$pid" >/dev/null 2>&1
    callgrind_control --instr=on "$pid" >/dev/null 2>&1
    curl --silent --config "$work/measured.curl"
    callgrind_control --instr=off "$pid" >/dev/null 2>&1
    callgrind_control --dump="$case" "$pid" >/dev/null 2>&1
    # The newest dump of this process holds the counts since --zero.
    dump=$(ls -t "$work"/callgrind.out."$pid".* | head -n1)
    total=$(awk '/^totals:/ {print $2}' "$dump")
    printf '%-6s %-32s %12s\n' "$case" "$path" "$((total / requests))"
    if [ -n "$annotate" ]; then
        mkdir -p "$annotate"
        cp "$dump" "$annotate/$case"
    fi
done
