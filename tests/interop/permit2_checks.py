"""`exact` through Permit2 with the official Python client: the store run with `STORE_PERMIT2=1`
(its payments settled by the sandbox facilitator process) offers every SKU through EIP-3009 and
through Permit2; the official client, choosing the Permit2 accept, signs its `exact` Permit2
permit, and — for a buyer who never approved Permit2 — its `eip2612GasSponsoring` approval,
reading the allowance and the EIP-2612 nonce from the sandbox's chain view (`{sandbox}/rpc`).
"""

from __future__ import annotations

import os

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http import PAYMENT_RESPONSE_HEADER, decode_payment_response_header
from x402.http.clients.httpx import x402HttpxClient
from x402.mechanisms.evm.constants import PERMIT2_ADDRESS, X402_EXACT_PERMIT2_PROXY_ADDRESS
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSignerWithRPC
from x402.schemas import PaymentPayload

from ledger import BASE_USDC
from suite import Suite, expect

RECEIPT = "store-rail-receipt"
TIMEOUT_SECONDS = 30.0


def _permit2_first(version: int, requirements: list) -> object:
    """The client's selector: the Permit2 accept of the challenge."""
    for requirement in requirements:
        if (requirement.extra or {}).get("assetTransferMethod") == "permit2":
            return requirement
    return requirements[0]


class Permit2Buyer:
    """The official client with a signer that reads the chain (the sandbox's chain view)."""

    def __init__(self, rpc_url: str) -> None:
        self.account = Account.create()
        self.rpc_url = rpc_url
        self.client = x402Client(payment_requirements_selector=_permit2_first)
        register_exact_evm_client(self.client, EthAccountSignerWithRPC(self.account, rpc_url))
        self.signed: list[PaymentPayload] = []
        self.client.on_after_payment_creation(lambda ctx: self.signed.append(ctx.payment_payload))

    def rpc(self, method: str, params: list) -> object:
        answer = httpx.post(self.rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                            timeout=10).json()
        expect("result" in answer, f"{method} on the chain view: {answer}")
        return answer["result"]

    def allowance(self) -> int:
        """The token's `allowance(buyer, Permit2)`, read from the chain view."""
        selector = "dd62ed3e"  # allowance(address,address)
        data = "0x" + selector + _word(self.account.address) + _word(PERMIT2_ADDRESS)
        return int(self.rpc("eth_call", [{"to": BASE_USDC.address, "data": data}, "latest"]), 16)

    def eip2612_nonce(self) -> int:
        """The token's `nonces(buyer)`, read from the chain view."""
        data = "0x7ecebe00" + _word(self.account.address)  # nonces(address)
        return int(self.rpc("eth_call", [{"to": BASE_USDC.address, "data": data}, "latest"]), 16)

    async def buy(self, url: str) -> httpx.Response:
        async with x402HttpxClient(self.client, timeout=TIMEOUT_SECONDS) as http:
            response = await http.get(url)
            await response.aread()
        return response


def _word(address: str) -> str:
    return address.lower().removeprefix("0x").rjust(64, "0")


def register(suite: Suite) -> None:
    store = os.environ["X402_PERMIT2_STORE"]
    rpc_url = f"{os.environ['X402_SANDBOX_FACILITATOR']}/rpc"
    url = f"{store}/api/x402/{RECEIPT}"

    def expect_permit2_purchase(buyer: Permit2Buyer, response: httpx.Response) -> dict:
        expect(response.status_code == 200, f"HTTP {response.status_code}: {response.text[:300]}")
        encoded = response.headers.get(PAYMENT_RESPONSE_HEADER)
        expect(encoded is not None, "no PAYMENT-RESPONSE on the purchase")
        settlement = decode_payment_response_header(encoded)
        expect(settlement.success, f"settlement failed: {settlement}")
        expect(len(buyer.signed) == 1, f"the client signed {len(buyer.signed)} payments, expected 1")
        signed = buyer.signed[0]
        expect((signed.accepted.extra or {}).get("assetTransferMethod") == "permit2",
               f"the client paid {signed.accepted}")
        authorization = signed.payload["permit2Authorization"]
        expect(authorization["spender"].lower() == X402_EXACT_PERMIT2_PROXY_ADDRESS.lower()
               and authorization["permitted"]["amount"] == signed.accepted.amount
               and authorization["witness"]["to"].lower() == signed.accepted.pay_to.lower(),
               f"not an exact Permit2 permit of the accept: {authorization}")
        return signed.extensions or {}

    @suite.check("permit2_exact_bought_by_the_official_client")
    async def bought() -> None:
        buyer = Permit2Buyer(rpc_url)
        expect(buyer.allowance() > 0, "a new sandbox payer has approved Permit2")
        extensions = expect_permit2_purchase(buyer, await buyer.buy(url))
        info = (extensions.get("eip2612GasSponsoring") or {}).get("info") or {}
        expect("signature" not in info, f"an approved payer signed an EIP-2612 permit: {info}")

    @suite.check("permit2_exact_eip2612_gas_sponsoring_by_the_official_client")
    async def sponsored() -> None:
        buyer = Permit2Buyer(rpc_url)
        # A payer who never approved Permit2: it pays only with its EIP-2612 approval.
        buyer.rpc("sandbox_approve", [buyer.account.address, "0"])
        expect(buyer.allowance() == 0, "the payer's allowance was not revoked")
        nonce = buyer.eip2612_nonce()
        extensions = expect_permit2_purchase(buyer, await buyer.buy(url))
        info = extensions["eip2612GasSponsoring"]["info"]
        expect(info["spender"].lower() == PERMIT2_ADDRESS.lower() and info["from"] == buyer.account.address,
               f"not the buyer's EIP-2612 approval of Permit2: {info}")
        expect(int(info["nonce"]) == nonce and buyer.eip2612_nonce() == nonce + 1,
               f"the facilitator did not submit the EIP-2612 approval (nonce {nonce} signed {info['nonce']})")
