"""A buyer made only of the official x402 Python client: `x402Client` with the EVM `exact`
scheme registered, driven over HTTP by `x402HttpxClient` (which answers a 402 by signing the
challenge and retrying with `PAYMENT-SIGNATURE`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eth_account import Account
from x402 import x402Client
from x402.http import PAYMENT_RESPONSE_HEADER, decode_payment_response_header
from x402.http.clients.httpx import x402HttpxClient
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.schemas import PaymentPayload, SettleResponse

TIMEOUT_SECONDS = 30.0


@dataclass
class Purchase:
    """What one paid GET came back with."""

    status: int
    body: Any
    headers: dict[str, str]
    settlement: SettleResponse | None
    signed: list[PaymentPayload] = field(default_factory=list)

    def describe(self) -> str:
        text = json.dumps(self.body)[:300] if self.body is not None else "<no JSON body>"
        return f"HTTP {self.status}, body {text}"


class Buyer:
    """A fresh `eth_account` key per instance, paying with the official client."""

    def __init__(self) -> None:
        self.account = Account.create()
        self.client = x402Client()
        register_exact_evm_client(self.client, self.account)
        self._signed: list[PaymentPayload] = []
        self.client.on_after_payment_creation(lambda ctx: self._signed.append(ctx.payment_payload))

    @property
    def address(self) -> str:
        return self.account.address

    async def buy(self, url: str, headers: dict[str, str] | None = None) -> Purchase:
        """GETs `url`, paying the 402 if one comes back."""
        first = len(self._signed)
        async with x402HttpxClient(self.client, timeout=TIMEOUT_SECONDS) as http:
            response = await http.get(url, headers=headers or {})
            await response.aread()
        try:
            body = response.json()
        except ValueError:
            body = None
        encoded = response.headers.get(PAYMENT_RESPONSE_HEADER)
        settlement = decode_payment_response_header(encoded) if encoded else None
        return Purchase(
            status=response.status_code,
            body=body,
            headers=dict(response.headers),
            settlement=settlement,
            signed=self._signed[first:],
        )
