"""Metered payments (`upto`): the official client's Permit2 `upto` scheme
(`x402.mechanisms.evm.upto`) pays the three routes of the crate's `examples/metered.rs`, which
runs against the sandbox facilitator served as its own HTTP process.

What was charged is read back from the sandbox facilitator's chain view (Ethereum JSON-RPC at
`POST {sandbox}/rpc`): the token's `Transfer(payer, payTo, amount)` logs and Permit2's
`nonceBitmap`, so each check compares the metered amount with what actually moved, not only with
what the server says it charged.

The environment (set by `run.sh`): `X402_METERED` (the example's URL), `X402_SANDBOX_FACILITATOR`,
`X402_METERED_PAY_TO` (the example's `--pay-to`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_account import Account
from eth_utils import keccak
from x402 import x402Client
from x402.http import (
    PAYMENT_REQUIRED_HEADER,
    PAYMENT_RESPONSE_HEADER,
    PAYMENT_SIGNATURE_HEADER,
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_signature_header,
)
from x402.http.clients.httpx import x402HttpxClient
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS, X402_UPTO_PERMIT2_PROXY_ADDRESS
from x402.mechanisms.evm.upto import UptoEvmClientScheme
from x402.schemas import PaymentPayload, SettleResponse, SupportedResponse

from ledger import BASE_USDC, TRANSFER_TOPIC
from suite import Suite, expect

BASE = "eip155:8453"
MAXIMUM = 500_000  # every route of the example: up to 0.50 USDC
ROW = 10_000  # 0.01 USDC a row
TOKEN = 1_000  # 0.001 USDC a token
OVERRIDES = "settlement-overrides"
TIMEOUT_SECONDS = 30.0


@dataclass
class Paid:
    """What one GET paid by the official client came back with."""

    response: httpx.Response
    settlement: SettleResponse | None
    signed: list[PaymentPayload] = field(default_factory=list)


class UptoBuyer:
    """A fresh key paying with the official client, only the `upto` scheme registered for Base."""

    def __init__(self) -> None:
        self.account = Account.create()
        self.client = x402Client()
        self.client.register(BASE, UptoEvmClientScheme(self.account))
        self._signed: list[PaymentPayload] = []
        self.client.on_after_payment_creation(lambda ctx: self._signed.append(ctx.payment_payload))

    @property
    def address(self) -> str:
        return self.account.address

    async def buy(self, url: str) -> Paid:
        first = len(self._signed)
        async with x402HttpxClient(self.client, timeout=TIMEOUT_SECONDS) as http:
            response = await http.get(url)
            await response.aread()
        encoded = response.headers.get(PAYMENT_RESPONSE_HEADER)
        settlement = decode_payment_response_header(encoded) if encoded else None
        return Paid(response, settlement, self._signed[first:])


class Chain:
    """The sandbox facilitator's ledger as the Base chain, over JSON-RPC."""

    def __init__(self, sandbox_url: str) -> None:
        self.url = f"{sandbox_url}/rpc"

    def _call(self, method: str, params: list[Any]) -> Any:
        answer = httpx.post(self.url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                            timeout=10).json()
        expect("result" in answer, f"{method} on the chain view: {answer}")
        return answer["result"]

    def transfers(self, payer: str, pay_to: str) -> list[int]:
        """The USDC amounts `payer` sent `pay_to`, oldest first."""
        logs = self._call("eth_getLogs", [{
            "address": BASE_USDC.address,
            "fromBlock": "0x0",
            "toBlock": "latest",
            "topics": [TRANSFER_TOPIC, _topic(payer), _topic(pay_to)],
        }])
        return [int(log["data"], 16) for log in logs]

    def nonce_used(self, owner: str, nonce: int) -> bool:
        """Permit2's `nonceBitmap(owner, nonce >> 8)` has bit `nonce & 255` set."""
        selector = keccak(text="nonceBitmap(address,uint256)")[:4].hex()
        data = "0x" + selector + _topic(owner)[2:] + f"{nonce >> 8:064x}"
        word = int(self._call("eth_call", [{"to": PERMIT2_ADDRESS, "input": data}, "latest"]), 16)
        return bool(word >> (nonce & 255) & 1)


def _topic(address: str) -> str:
    return "0x" + address.lower().removeprefix("0x").rjust(64, "0")


def expect_charged(paid: Paid, pay_to: str, metered: int) -> None:
    """One `upto` authorization of the full maximum, signed by the official client; no
    `Settlement-Overrides` reaching it."""
    response = paid.response
    expect(response.status_code == 200, f"HTTP {response.status_code} after paying: {response.text[:300]}")
    expect(OVERRIDES not in response.headers, f"Settlement-Overrides reached the client: {response.headers}")
    expect(len(paid.signed) == 1, f"the client signed {len(paid.signed)} payments, expected 1")
    accepted = paid.signed[0].accepted
    expect((accepted.scheme, accepted.network, accepted.asset, accepted.amount, accepted.pay_to)
           == ("upto", BASE, BASE_USDC.address, str(MAXIMUM), pay_to),
           f"the client signed {accepted}")
    authorization = paid.signed[0].payload["permit2Authorization"]
    expect(authorization["spender"].lower() == X402_UPTO_PERMIT2_PROXY_ADDRESS.lower()
           and authorization["permitted"]["amount"] == str(MAXIMUM),
           f"not an upto Permit2 authorization of the maximum: {authorization}")
    expect(0 < metered < MAXIMUM, "a check meters a charge between zero and the maximum")


def register(suite: Suite) -> None:
    metered = os.environ["X402_METERED"]
    sandbox = os.environ["X402_SANDBOX_FACILITATOR"]
    pay_to = os.environ["X402_METERED_PAY_TO"]
    chain = Chain(sandbox)

    @suite.check("upto_challenge_names_the_sandbox_facilitator")
    def _challenge() -> None:
        supported = SupportedResponse.model_validate_json(httpx.get(f"{sandbox}/supported", timeout=10).content)
        kinds = [k for k in supported.kinds if (k.x402_version, k.scheme, k.network) == (2, "upto", BASE)]
        expect(len(kinds) == 1, f"/supported lists upto on Base {len(kinds)} times: {supported.kinds}")
        facilitator_address = (kinds[0].extra or {}).get("facilitatorAddress")
        for path in ("/v1/rows?count=3", "/v1/rows-legacy?count=3", "/v1/tokens?count=3"):
            response = httpx.get(f"{metered}{path}", timeout=10)
            expect(response.status_code == 402, f"GET {path} unpaid: HTTP {response.status_code}")
            required = decode_payment_required_header(response.headers[PAYMENT_REQUIRED_HEADER])
            accepts = [(a.scheme, a.network, a.asset, a.amount, a.pay_to) for a in required.accepts]
            expect(accepts == [("upto", BASE, BASE_USDC.address, str(MAXIMUM), pay_to)], f"{path} offers {accepts}")
            extra = required.accepts[0].extra or {}
            expect(extra.get("assetTransferMethod") == "permit2"
                   and extra.get("facilitatorAddress") == facilitator_address
                   and (extra.get("name"), extra.get("version")) == ("USD Coin", "2"),
                   f"{path}: extra {extra}, the facilitator's upto address {facilitator_address}")
        # A count the maximum does not cover: 400 before any payment is asked for.
        too_many = httpx.get(f"{metered}/v1/rows?count={MAXIMUM // ROW + 1}", timeout=10)
        expect(too_many.status_code == 400 and PAYMENT_REQUIRED_HEADER not in too_many.headers,
               f"51 rows: HTTP {too_many.status_code} {dict(too_many.headers)}")

    async def rows(path: str, count: int) -> None:
        buyer = UptoBuyer()
        paid = await buyer.buy(f"{metered}{path}?count={count}")
        expect_charged(paid, pay_to, count * ROW)
        expect(paid.response.json() == [{"row": n} for n in range(count)],
               f"the body is not {count} rows: {paid.response.text[:300]}")
        settlement = paid.settlement
        expect(settlement is not None and settlement.success, f"PAYMENT-RESPONSE {settlement}")
        expect(settlement.amount == str(count * ROW) and (settlement.payer or "").lower() == buyer.address.lower(),
               f"PAYMENT-RESPONSE says {settlement.amount} from {settlement.payer}, metered {count * ROW}")
        expect(chain.transfers(buyer.address, pay_to) == [count * ROW],
               f"the chain moved {chain.transfers(buyer.address, pay_to)}, metered [{count * ROW}]")
        nonce = int(paid.signed[0].payload["permit2Authorization"]["nonce"])
        expect(chain.nonce_used(buyer.address, nonce), "the Permit2 nonce is not consumed on the chain view")

    @suite.check("upto_rows_charged_through_the_handle", "upto_challenge_names_the_sandbox_facilitator")
    async def _rows() -> None:
        await rows("/v1/rows", 7)

    @suite.check("upto_rows_charged_through_settlement_overrides", "upto_challenge_names_the_sandbox_facilitator")
    async def _legacy() -> None:
        await rows("/v1/rows-legacy", 12)

    @suite.check("upto_streamed_tokens_charged_after_the_body", "upto_challenge_names_the_sandbox_facilitator")
    async def _tokens() -> None:
        count = 9
        buyer = UptoBuyer()
        paid = await buyer.buy(f"{metered}/v1/tokens?count={count}")
        expect_charged(paid, pay_to, count * TOKEN)
        response = paid.response
        expect(response.headers.get("content-type", "").startswith("text/event-stream"),
               f"content-type {response.headers.get('content-type')}")
        expect(response.text == "".join(f"data: token {n}\n\n" for n in range(count)),
               f"the stream read: {response.text[:300]!r}")
        # The settlement is after the body: the head announces a trailer and carries no
        # PAYMENT-RESPONSE. httpx (h11) reads the chunked body to its end but does not expose
        # trailers, so the official client cannot read the settlement there: the chain view
        # shows the transfer, and the same payment sent again is answered (409) with the settlement.
        expect(response.headers.get("trailer", "").lower() == "payment-response",
               f"Trailer header {response.headers.get('trailer')!r}")
        expect(paid.settlement is None, f"PAYMENT-RESPONSE in the head of a streamed body: {paid.settlement}")
        moved: list[int] = []
        for _ in range(50):  # the settle ends with the body; allow the server's task to finish
            moved = chain.transfers(buyer.address, pay_to)
            if moved:
                break
            time.sleep(0.1)
        expect(moved == [count * TOKEN], f"the chain moved {moved}, metered [{count * TOKEN}]")

        # A payment buys one delivery of one request: sent again, for this stream or another, it
        # runs no new work and is answered 409 with the settlement recorded for it.
        signature = encode_payment_signature_header(paid.signed[0])
        for query, error in ((f"count={count}", "payment_already_delivered"),
                             ("count=2", "payment_used_for_another_request")):
            again = httpx.get(f"{metered}/v1/tokens?{query}", headers={PAYMENT_SIGNATURE_HEADER: signature},
                              timeout=TIMEOUT_SECONDS)
            expect(again.status_code == 409 and PAYMENT_RESPONSE_HEADER in again.headers,
                   f"the payment sent again ({query}): HTTP {again.status_code} {dict(again.headers)}")
            expect(again.json().get("error") == error, f"the payment sent again ({query}): {again.text}")
            replayed = decode_payment_response_header(again.headers[PAYMENT_RESPONSE_HEADER])
            expect(replayed.success and replayed.amount == str(count * TOKEN)
                   and (replayed.payer or "").lower() == buyer.address.lower(),
                   f"the settlement answered again: {replayed}")
            expect(OVERRIDES not in again.headers, "Settlement-Overrides reached the client")
        expect(chain.transfers(buyer.address, pay_to) == [count * TOKEN], "the payment sent again moved money again")
