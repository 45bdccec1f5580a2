"""Solana `exact` with the official Python client: its SVM scheme (`x402[svm]`, solders) pays the
store through the sandbox facilitator process, building the transaction from the sandbox's Solana
JSON-RPC (`getAccountInfo` of the mint, `getLatestBlockhash`); the transfer lands once, a replay
of the same PAYMENT-SIGNATURE is delivered again from the store's record, and the sandbox's RPC
reports the landed transaction (`getSignatureStatuses`).
"""
from __future__ import annotations

import os

import httpx
from solders.keypair import Keypair
from x402 import x402Client
from x402.http import PAYMENT_RESPONSE_HEADER, decode_payment_response_header, encode_payment_signature_header
from x402.http.clients.httpx import x402HttpxClient
from x402.mechanisms.svm.exact import register_exact_svm_client
from x402.mechanisms.svm.signers import KeypairSigner
from x402.schemas import PaymentPayload

from suite import Suite, expect

SOLANA = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
TIMEOUT_SECONDS = 30


def rpc(url: str, method: str, params: list) -> dict:
    answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=10)
    answer.raise_for_status()
    body = answer.json()
    expect("result" in body, f"{method}: {body}")
    return body["result"]


def register(suite: Suite, sandbox_facilitator: str) -> None:
    store = os.environ["X402_SOLANA_STORE"]
    pay_to = os.environ["X402_SOLANA_PAY_TO"]
    prefix = os.environ.get("X402_SLUG_PREFIX", "store")
    url = f"{store}/api/x402/{prefix}-rail-receipt"
    solana_rpc = f"{sandbox_facilitator}/rpc/solana"

    @suite.check("official_svm_client_buys_on_solana_through_the_sandbox_rpc")
    async def _buy() -> None:
        keypair = Keypair()
        client = x402Client()
        register_exact_svm_client(client, KeypairSigner(keypair), rpc_url=solana_rpc)
        signed: list[PaymentPayload] = []
        client.on_after_payment_creation(lambda ctx: signed.append(ctx.payment_payload))
        async with x402HttpxClient(client, timeout=TIMEOUT_SECONDS) as http:
            response = await http.get(url)
            await response.aread()
        expect(response.status_code == 200, f"the paid GET answered {response.status_code}: {response.text[:300]}")
        encoded = response.headers.get(PAYMENT_RESPONSE_HEADER)
        expect(encoded is not None, "no PAYMENT-RESPONSE on the paid answer")
        settlement = decode_payment_response_header(encoded)
        payer = str(keypair.pubkey())
        expect(settlement.success and str(settlement.network) == SOLANA,
               f"settlement: {settlement}")
        expect(settlement.payer == payer, f"payer {settlement.payer}, expected {payer}")
        expect(len(signed) == 1 and signed[0].accepted.pay_to == pay_to,
               f"signed {len(signed)} payments, paying {[p.accepted.pay_to for p in signed]}")

        statuses = rpc(solana_rpc, "getSignatureStatuses", [[settlement.transaction]])
        status = statuses["value"][0]
        expect(status is not None and status.get("err") is None and status.get("confirmationStatus") == "finalized",
               f"the sandbox's RPC says of {settlement.transaction}: {status}")
        landed = rpc(solana_rpc, "getSignaturesForAddress", [payer, {"limit": 10}])
        expect([entry["signature"] for entry in landed] == [settlement.transaction],
               f"the payer's transactions: {landed}")

        # The same payment again: delivered from the record, not settled twice.
        header = encode_payment_signature_header(signed[0])
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as http:
            again = await http.get(url, headers={"PAYMENT-SIGNATURE": header})
        expect(again.status_code == 200, f"the replay answered {again.status_code}: {again.text[:300]}")
        repeated = decode_payment_response_header(again.headers[PAYMENT_RESPONSE_HEADER])
        expect(repeated.transaction == settlement.transaction,
               f"the replay names {repeated.transaction}, not {settlement.transaction}")
        landed = rpc(solana_rpc, "getSignaturesForAddress", [payer, {"limit": 10}])
        expect(len(landed) == 1, f"the payer's transactions after the replay: {landed}")
