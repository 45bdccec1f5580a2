#!/usr/bin/env bash
# Interoperability suite: the official x402 Python SDK against the Rust store and crate.
#
# Builds the store and the sandbox facilitator (release), starts on 127.0.0.1 (port 0):
#   - the sandbox facilitator as its own HTTP process,
#   - a Python facilitator made of the official SDK (facilitator.py),
#   - four stores: embedded sandbox (demo), sandbox facilitator over HTTP (live),
#     Python facilitator over HTTP (live), sandbox facilitator over HTTP with STORE_PERMIT2=1,
#   - a throwaway PostgreSQL server, for a channels example the checks kill and restart,
#   - the metered, paid_mcp and channels examples (channels three times: the second with --rpc-url
#     against the faulty facilitator, whose first /settle loses its answer; the third with --rpc-url
#     against the sandbox facilitator's chain view, watching withdrawals) (and builds the x402-buyer package's siwx-proof, run by
#     siwx_checks.py),
# runs the checks (checks.py), stops everything it started, and ends with the line
# "N passed, M failed". Exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$here/.venv"
target="${CARGO_TARGET_DIR:-$root/target}"
pay_to="0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
export PYTHONDONTWRITEBYTECODE=1
# The processes are configured here only: drop STORE_* and SANDBOX_* settings of the caller.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep -E '^(STORE|SANDBOX)_' || true)

work="$(mktemp -d "${TMPDIR:-/tmp}/x402-interop.XXXXXX")"
pids=()
names=()

pg_ctl_cmd=()
cleanup() {
  local pid
  if [[ ${#pg_ctl_cmd[@]} -gt 0 ]]; then
    "${pg_ctl_cmd[@]}" stop -m immediate -D "$work/pg/data" >/dev/null 2>&1 || true
  fi
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

show_logs() {
  local name
  for name in "${names[@]}"; do
    if [[ -s "$work/$name.err" ]]; then
      echo "--- last lines of $name's stderr ---"
      tail -n 15 "$work/$name.err"
    fi
  done
}

setup_failed() {
  echo "setup failed: $1" >&2
  show_logs >&2
  echo "0 passed, 1 failed"
  exit 1
}

# 1. Python environment (reinstalled only when requirements.txt changes).
stamp="$venv/.requirements.sha256"
wanted="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv" || setup_failed "python3 -m venv"
fi
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$wanted" ]]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt" \
    || setup_failed "pip install -r requirements.txt"
  echo "$wanted" >"$stamp"
fi

# 2. Rust binaries.
(cd "$root" && cargo build --quiet --release -p x402-store \
  && cargo build --quiet --release -p tower-x402 --example sandbox_facilitator) \
  || setup_failed "cargo build"
store_bin="$target/release/store"
sandbox_bin="$target/release/examples/sandbox_facilitator"

# 3. Processes. start NAME CMD... runs CMD (with the environment given through `env`),
# waits for its "listening on http://ADDR" line and leaves the URL in $started_url.
started_url=""
start() {
  local name="$1"
  shift
  mkdir -p "$work/$name"
  (cd "$work/$name" && exec "$@") >"$work/$name.out" 2>"$work/$name.err" &
  local pid=$!
  pids+=("$pid")
  names+=("$name")
  local line
  for _ in $(seq 1 300); do
    line="$(grep -m1 -o 'listening on http://[^[:space:]]*' "$work/$name.out" || true)"
    if [[ -n "$line" ]]; then
      started_url="${line#listening on }"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      setup_failed "$name exited before listening"
    fi
    sleep 0.1
  done
  setup_failed "$name did not print 'listening on http://ADDR' within 30 s"
}

store_env() { # NAME: the environment every store gets
  echo "STORE_LISTEN=127.0.0.1:0" "STORE_DATABASE_URL=sqlite://$work/$1/store.db" "STORE_SLUG_PREFIX=store"
}

start sandbox-facilitator "$sandbox_bin" --listen 127.0.0.1:0
sandbox_url="$started_url"
start python-facilitator "$venv/bin/python" "$here/facilitator.py"
python_facilitator_url="$started_url"

# shellcheck disable=SC2046 # store_env's words are separate assignments
start store-demo env $(store_env store-demo) "$store_bin"
demo_store="$started_url"
# shellcheck disable=SC2046
start store-live env $(store_env store-live) STORE_FACILITATOR_URL="$sandbox_url" STORE_PAY_TO="$pay_to" "$store_bin"
live_store="$started_url"
# shellcheck disable=SC2046
start store-python env $(store_env store-python) STORE_FACILITATOR_URL="$python_facilitator_url" \
  STORE_PAY_TO="$pay_to" "$store_bin"
python_store="$started_url"
# shellcheck disable=SC2046
start store-permit2 env $(store_env store-permit2) STORE_FACILITATOR_URL="$sandbox_url" STORE_PAY_TO="$pay_to" \
  STORE_PERMIT2=1 "$store_bin"
permit2_store="$started_url"
# Solana: a store whose Solana door pays its own address through the sandbox facilitator process,
# bought from by solana_checks.py with the official SVM client reading the sandbox's /rpc/solana.
solana_pay_to="2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
# shellcheck disable=SC2046
start store-solana env $(store_env store-solana) STORE_FACILITATOR_URL="$sandbox_url" \
  STORE_PAY_TO="$pay_to" STORE_SECOND_PAY_TO="$solana_pay_to" "$store_bin"
export X402_SOLANA_STORE="$started_url" X402_SOLANA_PAY_TO="$solana_pay_to"

# Metered payments (upto): the crate's example `metered` against the sandbox facilitator over
# HTTP, paid by upto_checks.py (X402_METERED, X402_METERED_PAY_TO).
(cd "$root" && cargo build --quiet --release -p tower-x402 --example metered) || setup_failed "cargo build metered"
start metered "$target/release/examples/metered" --listen 127.0.0.1:0 --facilitator "$sandbox_url" --pay-to "$pay_to"
export X402_METERED="$started_url" X402_METERED_PAY_TO="$pay_to"
# Paid MCP tools: the paid_mcp example, its payments settled by the sandbox facilitator process.
(cd "$root" && cargo build --quiet --release -p tower-x402 --features mcp --example paid_mcp) \
  || setup_failed "cargo build --example paid_mcp"
start paid-mcp "$target/release/examples/paid_mcp" --listen 127.0.0.1:0 --facilitator "$sandbox_url" --pay-to "$pay_to"
export X402_PAID_MCP="$started_url"
# Payment channels (batch-settlement): the channels example against the sandbox facilitator over
# HTTP, paid by channels_checks.py, which reads the claims on the sandbox's chain view. Its own
# receiver (no other service is paid there), and claims only on SIGTERM, which the last check sends.
channels_pay_to="0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
(cd "$root" && cargo build --quiet --release --example channels) || setup_failed "cargo build --example channels"
start channels "$target/release/examples/channels" --listen 127.0.0.1:0 --facilitator "$sandbox_url" \
  --pay-to "$channels_pay_to" --claim-every 86400
export X402_CHANNELS="$started_url" X402_CHANNELS_PID="${pids[-1]}" X402_CHANNELS_PAY_TO="$channels_pay_to"
# A deposit whose /settle answer is lost: a second channels example, with --rpc-url, against the
# faulty facilitator (its first /settle settles and answers 504) and its ledger as a chain.
(cd "$root" && cargo build --quiet --release --example faulty_facilitator) \
  || setup_failed "cargo build --example faulty_facilitator"
"$target/release/examples/faulty_facilitator" --listen 127.0.0.1:0 --rpc-listen 127.0.0.1:0 \
  --fault answer-lost >"$work/faulty-facilitator.out" 2>"$work/faulty-facilitator.err" &
pids+=("$!")
names+=("faulty-facilitator")
faulty_url=""
faulty_rpc=""
for _ in $(seq 1 300); do
  faulty_url="$(grep -m1 '^facilitator http://' "$work/faulty-facilitator.out" | cut -d' ' -f2 || true)"
  faulty_rpc="$(grep -m1 '^rpc http://' "$work/faulty-facilitator.out" | cut -d' ' -f2 || true)"
  [[ -n "$faulty_url" && -n "$faulty_rpc" ]] && break
  sleep 0.1
done
[[ -n "$faulty_url" && -n "$faulty_rpc" ]] || setup_failed "faulty_facilitator did not print its URLs within 30 s"
start channels-lost "$target/release/examples/channels" --listen 127.0.0.1:0 --facilitator "$faulty_url" \
  --rpc-url "$faulty_rpc" --pay-to "$channels_pay_to"
export X402_CHANNELS_LOST="$started_url" X402_CHANNELS_LOST_RPC="$faulty_rpc"
# A payer's withdrawal seen on chain: a third channels example, with --rpc-url against the sandbox
# facilitator's chain view, so that it watches its channels for withdrawals (and claims them at
# once); its own receiver, and no claim on an interval within the suite.
channels_watch_pay_to="0x6813Eb9362372EEF6200f3b1dbC3f819671cBA69"
start channels-watch "$target/release/examples/channels" --listen 127.0.0.1:0 --facilitator "$sandbox_url" \
  --rpc-url "$sandbox_url/rpc" --pay-to "$channels_watch_pay_to" --claim-every 86400
export X402_CHANNELS_WATCH="$started_url" X402_CHANNELS_WATCH_PAY_TO="$channels_watch_pay_to"
# A channels example killed while its claim is in flight, restarted and stopped: started by
# channels_crash_checks.py itself (it kills and restarts it), on a throwaway PostgreSQL server
# (its data in $work; as root, initdb and the server run as the postgres user).
pg_bin="${PG_BIN:-$(compgen -G "/usr/lib/postgresql/*/bin" | sort -V | tail -n 1 || true)}"
[[ -x "$pg_bin/initdb" ]] || setup_failed "no PostgreSQL: initdb not under /usr/lib/postgresql/*/bin (set PG_BIN; tests/run.sh installs it)"
as_postgres=()
if [[ "$(id -u)" -eq 0 ]]; then
  as_postgres=(runuser -u postgres --)
  chmod 755 "$work"
  mkdir -p "$work/pg"
  chown postgres:postgres "$work/pg"
else
  mkdir -p "$work/pg"
fi
"${as_postgres[@]}" "$pg_bin/initdb" --auth=trust --username=postgres --encoding=UTF8 --no-sync \
  -D "$work/pg/data" >"$work/pg.out" 2>&1 || setup_failed "initdb: $(tail -n 5 "$work/pg.out")"
pg_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
pg_ctl_cmd=("${as_postgres[@]}" "$pg_bin/pg_ctl")
"${pg_ctl_cmd[@]}" start -w -t 60 -D "$work/pg/data" -l "$work/pg/server.log" \
  -o "-p $pg_port -h 127.0.0.1 -c unix_socket_directories= -c fsync=off" >>"$work/pg.out" 2>&1 \
  || setup_failed "PostgreSQL did not start: $(tail -n 5 "$work/pg.out")"
export X402_CHANNELS_BIN="$target/release/examples/channels"
export X402_CHANNELS_DATABASE="postgres://postgres@127.0.0.1:$pg_port/postgres"
# Sign-in-with-x proofs of the sandbox wallet, checked by the official verification (siwx_checks.py).
(cd "$root" && cargo build --quiet --release -p x402-buyer --bin siwx-proof) \
  || setup_failed "cargo build -p x402-buyer --bin siwx-proof"
export X402_SIWX_PROOF="$target/release/siwx-proof"

# 4. Checks.
status=0
X402_DEMO_STORE="$demo_store" X402_LIVE_STORE="$live_store" X402_PYTHON_STORE="$python_store" X402_PERMIT2_STORE="$permit2_store" \
  X402_PYTHON_FACILITATOR="$python_facilitator_url" X402_SANDBOX_FACILITATOR="$sandbox_url" X402_PAY_TO="$pay_to" X402_SLUG_PREFIX=store \
  "$venv/bin/python" "$here/checks.py" --results "$work/results" &
checks_pid=$!
pids+=("$checks_pid") # in the background so that a signal stops everything at once
wait "$checks_pid" || status=$?

if [[ -s "$work/results" ]]; then
  read -r passed failed <"$work/results"
else
  echo "checks.py stopped before reporting (exit $status)" >&2
  passed=0
  failed=1
fi
if [[ "$failed" -ne 0 || "$status" -ne 0 ]]; then
  show_logs
  [[ "$failed" -ne 0 ]] || failed=1
fi
echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
