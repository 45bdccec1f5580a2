#!/usr/bin/env bash
# Heap allocations per request beside the peers', counted with dhat by one harness
# (benches/peers/src/allocations.rs), and printed as one table:
#   bash benches/peers/allocations.sh [--sites DIR]
#
# Each middleware sits in front of the same axum handler and pays through an in-process
# facilitator that answers at once; every paid request carries its own EIP-3009 authorization
# signed for the middleware's own 402 challenge; 5 warm-up requests, then 200 counted, each
# answer checked (200 with PAYMENT-RESPONSE, or 402 with PAYMENT-REQUIRED). Columns: blocks and
# bytes a paid request and a 402 allocate beyond the bare route, and the bare route's own.
#
# tower-x402's line comes from its test (`cargo test -p tower-x402-benches --test
# allocations_axum`), the peers' from `peer-allocations` in benches/peers, each built in its own
# workspace: linked into one binary, tower-x402's serde_json features (`preserve_order`) would
# also change the peers' maps and so their counts.
#
# --sites DIR: also writes dhat's per-site JSON for every counted run to DIR and prints, for the
# paid requests and the 402s, what allocated the blocks (benches/peers/sites.py).
set -euo pipefail
cd "$(dirname "$0")/../.."

sites=
while [ $# -gt 0 ]; do
    case "$1" in
    --sites) sites=$(realpath -m "$2"); shift 2 ;;
    *) echo "usage: $0 [--sites DIR]" >&2; exit 2 ;;
    esac
done
if [ -n "$sites" ]; then
    mkdir -p "$sites"
    export ALLOCATION_SITES="$sites"
fi

tower=$(cargo test --quiet -p tower-x402-benches --test allocations_axum -- --nocapture |
    grep -E '^(middleware|tower-x402) ')
peers=$(cargo run --quiet --release --locked --manifest-path benches/peers/Cargo.toml \
    --bin peer-allocations | grep -v '^middleware ')
printf '%s\n%s\n' "$tower" "$peers"

if [ -n "$sites" ]; then
    for middleware in tower-x402 x402-axum r402; do
        echo
        python3 benches/peers/sites.py "$sites/$middleware-paid.json" "$sites/$middleware-402.json"
    done
fi
