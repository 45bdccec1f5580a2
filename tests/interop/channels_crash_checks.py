"""A `channels` example killed (`kill -9`) while its claim is in flight, then restarted on the
same PostgreSQL store and stopped with SIGTERM: the restarted process either claims and sweeps
what the official client was charged, or exits non-zero naming the amount left unclaimed. Never
exit 0 with charges unclaimed.

The examples run here are started by this check (it must kill and restart them), from
`X402_CHANNELS_BIN`, on the database `X402_CHANNELS_DATABASE`, paying their own receiver. Their
facilitator is a proxy in this process in front of the sandbox facilitator
(`X402_SANDBOX_FACILITATOR`): it forwards every call, except that it holds the first claim's
`/settle` open without forwarding it (a facilitator that hangs and does nothing), so the claim is
in flight, and known to be, when the first example is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from channels_checks import ROW, ChannelBuyer, Contract, channel_id_of, expect_rows, rows_url
from suite import Suite, expect

# Hardhat's third account: a receiver no other check is paid at.
RECEIVER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
CLAIM_LEASE_SECONDS = "3"


class HangingClaimProxy:
    """A facilitator that forwards to `upstream`, but holds the first claim's `/settle` (a
    `/settle` whose payload is a claim) open until closed, never forwarding it."""

    def __init__(self, upstream: str) -> None:
        self.claim_held = threading.Event()
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if method == "POST" and self.path == "/settle" and proxy._is_first_claim(body):
                    proxy.claim_held.set()
                    proxy._release.wait()
                    self.send_response(504)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                answer = httpx.request(method, upstream + self.path, content=body, headers=headers, timeout=30)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def do_GET(self) -> None:  # noqa: N802 (the handler's protocol)
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

        self._claims_seen = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _is_first_claim(self, body: bytes) -> bool:
        try:
            payload = json.loads(body).get("paymentPayload", {}).get("payload", {})
        except (ValueError, AttributeError):
            return False
        if not isinstance(payload, dict) or payload.get("type") != "claim":
            return False
        with self._lock:
            self._claims_seen += 1
            return self._claims_seen == 1

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()


class Example:
    """One `channels` example process, its log in a file, its URL read from its first line."""

    def __init__(self, binary: str, args: list[str], log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen([binary, "--listen", "127.0.0.1:0", *args], stdout=log.open("wb"),
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            for line in log.read_text(errors="replace").splitlines():
                if "listening on http://" in line:
                    self.url = "http://" + line.split("listening on http://", 1)[1].split()[0]
                    return
            expect(self.process.poll() is None, f"the example exited before listening: {log.read_text()[-2000:]}")
            expect(time.monotonic() < deadline, "the example did not listen within 30 s")
            time.sleep(0.1)

    def stop(self, signal_number: int, within: float) -> int:
        self.process.send_signal(signal_number)
        try:
            return self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the example still ran {within:.0f} s after signal {signal_number}") from None


def register(suite: Suite) -> None:
    binary = os.environ["X402_CHANNELS_BIN"]
    database = os.environ["X402_CHANNELS_DATABASE"]
    sandbox = os.environ["X402_SANDBOX_FACILITATOR"]
    rpc = f"{sandbox}/rpc"

    @suite.check("channels_sigterm_after_a_crash_claims_or_exits_non_zero")
    async def _crash_then_sigterm() -> None:
        contract = Contract(rpc)
        proxy = HangingClaimProxy(sandbox)
        logs = Path(tempfile.mkdtemp(prefix="x402-channels-crash-"))
        common = ["--facilitator", proxy.url, "--pay-to", RECEIVER, "--database-url", database,
                  "--claim-lease", CLAIM_LEASE_SECONDS]
        try:
            first = Example(binary, [*common, "--claim-every", "1"], logs / "first.log")
            buyer = ChannelBuyer(rpc)
            charged = 0
            channel_id = ""
            for count in (3, 2, 4):
                paid = await buyer.buy(rows_url(first.url, count))
                expect_rows(paid, count)
                channel_id = channel_id or channel_id_of(paid.signed[0])
                charged += count * ROW
            # The claimer's next round sends the claim, which hangs; the process dies under it.
            expect(proxy.claim_held.wait(timeout=30), "no claim reached the facilitator within 30 s")
            first.process.kill()
            first.process.wait()
            expect(contract.channel(channel_id)[1] == 0, "the held claim moved nothing")
            claimed_before, _ = contract.receiver(RECEIVER)

            # A restart that would not claim for a day, stopped at once: its shutdown must deal
            # with the channel still under the dead claimer's lease.
            second = Example(binary, [*common, "--claim-every", "86400"], logs / "second.log")
            status = second.stop(signal.SIGTERM, within=60)
            output = second.log.read_text(errors="replace")
            _, claimed = contract.channel(channel_id)
            if status == 0:
                expect(claimed == charged,
                       f"exit 0, but channels({channel_id}).totalClaimed is {claimed} of {charged} charged: {output[-1500:]}")
                receiver_claimed, receiver_settled = contract.receiver(RECEIVER)
                expect(receiver_claimed - claimed_before == charged and receiver_settled == receiver_claimed,
                       f"receivers({RECEIVER}) is (claimed {receiver_claimed}, settled {receiver_settled}) after claiming {charged}")
            else:
                expect(claimed < charged, f"exit {status} though the channel was claimed in full")
                expect(str(charged - claimed) in output and "unclaimed" in output,
                       f"exit {status} without naming the {charged - claimed} left unclaimed: {output[-1500:]}")
        finally:
            proxy.close()
