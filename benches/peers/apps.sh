# Sourced by the scripts beside it, from the repository's root: builds x402-load and the peers
# in release mode, starts the stub facilitator every app pays through (`$stub`, its base URL),
# and stops every process in `children` and removes `$work` on exit. `command_of APP` is the
# command serving APP's `/bare` and `/paid` routes (tower-x402's also `/paid/after`) through it.

cargo build --release --quiet -p tower-x402-benches --bin x402-load
cargo build --release --quiet --locked --manifest-path benches/peers/Cargo.toml
load=target/release/x402-load
peers=benches/peers/target/release

work=$(mktemp -d)
children=()
cleanup() {
    for pid in "${children[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Waits for the first line of FILE (an address a process prints) and echoes it.
address_in() {
    for _ in $(seq 1 600); do
        if [ -s "$1" ]; then head -n1 "$1"; return; fi
        sleep 0.1
    done
    echo "no address in $1" >&2
    exit 1
}

"$load" stub >"$work/stub.addr" &
children+=($!)
stub="http://$(address_in "$work/stub.addr")"

command_of() {
    case "$1" in
    tower-x402) echo "$load app --facilitator $stub" ;;
    x402-axum) echo "$peers/peer-x402-axum --facilitator $stub" ;;
    r402) echo "$peers/peer-r402 --facilitator $stub" ;;
    x402-axum-instant) echo "$peers/peer-x402-axum-instant --facilitator $stub" ;;
    *) echo "unknown app $1" >&2; exit 2 ;;
    esac
}
