#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need and is missing, then runs
# `cargo test --workspace --all-features` (extra arguments are passed on to it).
#
# - PostgreSQL's binaries: the store's tests, tower-x402-postgres's (crates/tower-x402-postgres:
#   both stores against their contracts) and the library's PostgreSQL-ledger tests start throwaway
#   PostgreSQL servers.
# - Chromium: the store's browser tests render and pay its pages in it.
# - Node.js and npm, and the browser tests' npm packages (pinned by package-lock.json).
# - promtool (Debian's `prometheus` package): the store's tests check its metrics scrape with it.
# - nginx: the reverse-proxy tests put Debian's nginx, with its stock buffers, in front of the
#   store and the `metered` example (each test runs its own in the foreground on a free port).
#
# System packages come from Debian's (or Ubuntu's) archive through apt-get, with sudo when not
# run as root. On a machine that already has them this only runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# Debian installs nginx in /usr/sbin, which is not on every user's PATH.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
# The tests look for initdb under /usr/lib/postgresql/*/bin unless PG_BIN names another place.
if [ -z "${PG_BIN:-}" ] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    missing+=(postgresql)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]} (Debian packages)"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "tests/run.sh: no apt-get here; install ${missing[*]} with this system's package manager and run again" >&2
        exit 1
    fi
    if [ "$(id -u)" -eq 0 ]; then
        as_root=()
    elif command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        echo "tests/run.sh: installing ${missing[*]} needs root, and sudo is not installed" >&2
        exit 1
    fi
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

browser=examples/store/tests/browser
if [ "$browser/package-lock.json" -nt "$browser/node_modules/.package-lock.json" ]; then
    step "npm packages of the store's browser tests (pinned by package-lock.json)"
    bash "$browser/install.sh"
fi

step "cargo test --workspace --all-features${*:+ $*}"
cargo test --workspace --all-features "$@"
