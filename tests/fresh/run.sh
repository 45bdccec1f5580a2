#!/usr/bin/env bash
# A newcomer's build: a small app on this repository's library crates (path dependencies, the
# way a published version resolves them) with a lock file resolved now, not the workspace's
# Cargo.lock, so the versions are whatever crates.io serves today. It fails when that tree holds
# two major versions of reqwest or hyper (two HTTP stacks compiled into every app), then builds
# the app and runs its test: the README's "Sell through payment channels" and "Test a channel
# route", as written there.
#
# The app is copied out of the repository (a lock file of its own, no workspace above it); its
# build reuses $CARGO_TARGET_DIR/fresh (or target/fresh) between runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cp -r "$root/tests/fresh/app/." "$work/"
sed -i "s|@ROOT@|$root|g" "$work/Cargo.toml"
cd "$work"

echo "resolving a fresh lock file"
cargo generate-lockfile
# Every package of the tree, one line each: NAME VERSION.
cargo metadata --format-version 1 --locked |
    python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    print(package["name"], package["version"])
' >"$work/packages.txt"

# The semver-incompatible versions ("majors": 0.12 and 0.13 are two) of NAME in the tree.
majors() {
    awk -v name="$1" '$1 == name { split($2, v, "."); print (v[1] == "0" ? "0." v[2] : v[1]) }' \
        "$work/packages.txt" | sort -u
}
status=0
for name in reqwest hyper; do
    found="$(majors "$name" | paste -sd ' ' -)"
    echo "$name: ${found:-none}"
    if [ "$(majors "$name" | wc -l)" -gt 1 ]; then
        echo "tests/fresh: a fresh resolution holds $name $found; the paths to each:" >&2
        for version in $(awk -v name="$name" '$1 == name { print $2 }' "$work/packages.txt"); do
            cargo tree --locked -e normal,build -i "$name@$version" >&2 || true
        done
        status=1
    fi
done
[ "$status" -eq 0 ] || exit "$status"

echo "building the app and running its test"
CARGO_TARGET_DIR="$target/fresh" cargo test --locked
