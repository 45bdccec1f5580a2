#!/usr/bin/env bash
# The load benchmark's `guarantees-off` variant: a copy of this tree (tracked files as they are
# now, uncommitted changes included) with guarantees-off.patch applied.
#   bash benches/load/guarantees-off.sh DIR      the copy in DIR/src, built into DIR/target
#   bash benches/load/guarantees-off.sh --check  only whether the patch still applies
# Stops when the patch does not apply: the code it takes the guarantees out of has changed, and
# the patch has to follow it.
set -euo pipefail
cd "$(dirname "$0")/../.."

check=false
if [ "${1:-}" = "--check" ]; then
    check=true
    dir="$(mktemp -d)"
    trap 'rm -rf "$dir"' EXIT
else
    dir="${1:?usage: guarantees-off.sh DIR | --check}"
fi
rm -rf "$dir/src"
mkdir -p "$dir/src"
tree=$(git stash create)
git archive "${tree:-HEAD}" | tar -x -C "$dir/src"
# A repository of its own: inside this one, `git apply` would skip the patch's paths as lying
# outside the current directory, and leave the copy unchanged.
if ! (cd "$dir/src" && git init --quiet && git apply --whitespace=nowarn) \
    <benches/load/guarantees-off.patch; then
    echo "benches/load/guarantees-off.patch no longer applies to this tree" >&2
    exit 1
fi
if grep -q 'timeout_at' "$dir/src/src/facilitator/http/transport.rs"; then
    echo "benches/load/guarantees-off.patch left the facilitator call's deadline in" >&2
    exit 1
fi
if $check; then
    echo "benches/load/guarantees-off.patch applies"
    exit 0
fi
echo "building the guarantees-off variant in $dir"
(cd "$dir/src" && RUSTFLAGS="-A warnings" CARGO_TARGET_DIR="$PWD/../target" \
    cargo build --release --quiet --locked -p tower-x402-benches --bin x402-load)
