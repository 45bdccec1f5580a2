"""A facilitator over HTTP built from the official x402 Python package, for testing servers.

`POST /verify` and `POST /settle` bodies must validate strictly against the official
`VerifyRequest` / `SettleRequest` models (themselves made of `PaymentPayload` and
`PaymentRequirements`): any validation error, or any key the models do not know, is
answered with 400 and recorded. Valid bodies go to the official `x402FacilitatorSync` with
the official EVM `ExactEvmScheme` registered for eip155:8453, whose chain access is the
in-memory ledger of `ledger.py` (settlement answers with a made-up transaction hash).

Test-control routes (not part of the facilitator API):
- `POST /_fund` `{"address": "0x…", "amount": "<atomic>"}` credits Base USDC to a payer.
- `GET /_observed` lists every `/verify` and `/settle` call with its outcome.

Run as a program it prints one line `listening on http://ADDR` and serves until killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError
from x402 import x402FacilitatorSync
from x402.mechanisms.evm.exact import ExactEvmFacilitatorScheme, ExactEvmSchemeConfig
from x402.schemas import SettleRequest, VerifyRequest
from x402.schemas.helpers import match_payload_to_requirements

from ledger import BASE_USDC, LedgerSigner, UsdcLedger

NETWORK = "eip155:8453"
REQUEST_MODELS = {"/verify": VerifyRequest, "/settle": SettleRequest}


def unknown_keys(raw: Any, known: Any, path: str = "") -> list[str]:
    """Paths present in `raw` but absent from the model's re-serialisation `known`."""
    missing: list[str] = []
    if isinstance(raw, dict) and isinstance(known, dict):
        for key, value in raw.items():
            here = f"{path}.{key}" if path else key
            if key not in known:
                missing.append(here)
            else:
                missing.extend(unknown_keys(value, known[key], here))
    elif isinstance(raw, list) and isinstance(known, list):
        for index, (a, b) in enumerate(zip(raw, known)):
            missing.extend(unknown_keys(a, b, f"{path}[{index}]"))
    return missing


class PythonFacilitator:
    """The official facilitator plus a record of every call, safe to share across threads."""

    def __init__(self) -> None:
        self.ledger = UsdcLedger.with_tokens(BASE_USDC)
        self.signer = LedgerSigner(self.ledger, chain_id=BASE_USDC.chain_id)
        scheme = ExactEvmFacilitatorScheme(self.signer, ExactEvmSchemeConfig(simulate_in_settle=False))
        self.facilitator = x402FacilitatorSync()
        self.facilitator.register([NETWORK], scheme)
        self._observed: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def observed(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._observed)

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._observed.append(entry)

    def supported(self) -> dict[str, Any]:
        return self.facilitator.get_supported().model_dump(mode="json", by_alias=True, exclude_none=True)

    def handle(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """Validates and answers one `/verify` or `/settle` body: (status, JSON)."""
        model = REQUEST_MODELS[path]
        entry: dict[str, Any] = {"endpoint": path, "valid_body": False}
        try:
            raw = json.loads(body)
            request = model.model_validate_json(body, strict=True)
        except (ValueError, ValidationError) as error:
            entry["errors"] = " ".join(str(error).split())
            self._record(entry)
            return 400, {"error": f"body does not match the x402 {model.__name__} model", "detail": str(error)}
        strays = unknown_keys(raw, request.model_dump(mode="json", by_alias=True, exclude_unset=True))
        if strays:
            entry["errors"] = f"keys unknown to the x402 models: {strays}"
            self._record(entry)
            return 400, {"error": entry["errors"]}
        if request.x402_version != request.payment_payload.x402_version:
            entry["errors"] = "x402Version differs from paymentPayload.x402Version"
            self._record(entry)
            return 400, {"error": entry["errors"]}
        entry["valid_body"] = True
        entry["accepted_matches_requirements"] = match_payload_to_requirements(
            2, raw["paymentPayload"], raw["paymentRequirements"]
        )
        entry["payer"] = request.payment_payload.payload.get("authorization", {}).get("from")
        entry["body"] = raw
        try:
            if path == "/verify":
                result = self.facilitator.verify(request.payment_payload, request.payment_requirements)
            else:
                result = self.facilitator.settle(request.payment_payload, request.payment_requirements)
        except Exception as error:  # the official code raises for unsupported schemes/networks
            entry["errors"] = f"{type(error).__name__}: {error}"
            self._record(entry)
            return 500, {"error": entry["errors"]}
        answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        entry["result"] = answer
        self._record(entry)
        return 200, answer

    def fund(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            data = json.loads(body)
            self.ledger.fund(BASE_USDC.address, data["address"], int(data["amount"]))
        except (ValueError, KeyError, TypeError) as error:
            return 400, {"error": str(error)}
        return 200, {"address": data["address"], "balance": str(self.ledger.balance(BASE_USDC.address, data["address"]))}


def make_handler(state: PythonFacilitator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path == "/supported":
                self._reply(200, state.supported())
            elif self.path == "/_observed":
                self._reply(200, state.observed())
            else:
                self._reply(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path in REQUEST_MODELS:
                self._reply(*state.handle(self.path, body))
            elif self.path == "/_fund":
                self._reply(*state.fund(body))
            else:
                self._reply(404, {"error": f"no route {self.path}"})

    return Handler


def serve(host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, PythonFacilitator]:
    """Starts the facilitator on a background thread; returns the server and its state."""
    state = PythonFacilitator()
    server = ThreadingHTTPServer((host, port), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    state = PythonFacilitator()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
