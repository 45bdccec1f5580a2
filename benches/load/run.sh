#!/usr/bin/env bash
# The load benchmark, from a fresh clone:
#   bash benches/load/run.sh [--peers] [--rounds N] [--seconds S] [--warm-up S] [--connections C] [--channel-rate R] [--out FILE]
#   bash benches/load/run.sh --parts [--rounds N] [--seconds S] ...
#   bash benches/load/run.sh memory [--requests N] [--concurrency C] [--stub-facilitator]
#   bash benches/load/run.sh latency [--rtt-ms MS] [--settle-delay-ms MS] [--requests N] [--concurrency C]
#   bash benches/load/run.sh channel [--seconds S] [--connections C] [--vouchers N]
# Installs wrk and curl from Debian when missing and builds everything in release mode. With
# --peers it also builds benches/peers (x402-axum and r402, a separate workspace with its own
# lockfile) and measures them in the same run, every process started afresh each round
# (`--respawn`), with tower-x402 also in a process of its own (`tower-x402-process`, settling
# after the work and settling first), as they run, and in another (`tower-x402-channel`)
# serving `paid_channel`: each request paid with a payment-channel voucher, signed before each
# wrk run (enough for --channel-rate req/s).
# `memory` runs the store binary under mixed traffic
# and prints its RSS. `latency` times paid requests with a facilitator 50 ms away whose /settle
# answers 2 s later still (`exact` settled after the work, settled first, a channel's voucher,
# x402-axum and r402), and the CPU of the app and the facilitator per paid request. --parts measures the
# paid path taken apart: tower-x402's app in a process of its own once per variant
# (`x402-load app --part NAME`: the full path, then one part replaced at a time) and x402-axum,
# paid requests only, in interleaved rounds, with app CPU, context switches and (where
# `perf stat` can count them) cache misses per request, the last variant, `guarantees-off`,
# with every guarantee x402-axum does not give switched off through the core's configuration.
# Every process starts afresh, from a copy of its binary, at
# each round (`--respawn`).
# `channel` runs wrk against the app paid with payment-channel vouchers (`paid_channel`), one
# channel per connection, each request with a voucher of its own signed before the run, beside
# the same process's bare route.
# See BENCHMARKS.md for what each prints.
set -euo pipefail
cd "$(dirname "$0")/../.."

# No wrk needed: the latency case is its own client. The peers are measured beside it.
if [ "${1:-}" = "latency" ]; then
    shift
    cargo build --release --quiet -p tower-x402-benches --bin x402-load
    cargo build --release --quiet --locked --manifest-path benches/peers/Cargo.toml
    peer_bin="${CARGO_TARGET_DIR:-benches/peers/target}/release"
    exec "${CARGO_TARGET_DIR:-target}/release/x402-load" latency \
        --peer "x402-axum=$peer_bin/peer-x402-axum" --peer "r402=$peer_bin/peer-r402" "$@"
fi

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

if [ "${1:-}" = "channel" ]; then
    shift
    cargo build --release --quiet -p tower-x402-benches --bin x402-load
    exec "${CARGO_TARGET_DIR:-target}/release/x402-load" channel "$@"
fi

if [ "${1:-}" = "memory" ]; then
    shift
    cargo build --release --quiet -p x402-store --bin store -p tower-x402-benches --bin x402-load
    exec "${CARGO_TARGET_DIR:-target}/release/x402-load" memory --store "${CARGO_TARGET_DIR:-target}/release/store" "$@"
fi

# Where cargo puts the binaries (CARGO_TARGET_DIR, when set, holds the peers' too).
bin="${CARGO_TARGET_DIR:-target}/release"
peer_bin="${CARGO_TARGET_DIR:-benches/peers/target}/release"
peers=()
args=()
for arg in "$@"; do
    if [ "$arg" = "--parts" ]; then
        cargo build --release --quiet --locked --manifest-path benches/peers/Cargo.toml
        peers=(--peers-only --respawn --only paid --cache-misses)
        for part in full ledger-noop ledger-small events http2 reqwest-plain facilitator-in-process guarantees-off; do
            peers+=(--peer "tower-x402:$part=self:$part")
        done
        peers+=(--peer "x402-axum=$peer_bin/peer-x402-axum")
    elif [ "$arg" = "--peers" ]; then
        cargo build --release --quiet --locked --manifest-path benches/peers/Cargo.toml
        peers=(--respawn --peer "tower-x402-process=self"
            --peer "tower-x402-channel=self"
            --skip "tower-x402-process/paid_channel,tower-x402-channel/402,tower-x402-channel/paid,tower-x402-channel/paid_before,tower-x402-channel/bare_402"
            --peer "x402-axum=$peer_bin/peer-x402-axum"
            --peer "r402=$peer_bin/peer-r402")
    else
        args+=("$arg")
    fi
done
cargo build --release --quiet -p tower-x402-benches --bin x402-load
exec "$bin/x402-load" run "${peers[@]}" "${args[@]}"
