"""Checks of the crate's sandbox facilitator, run as its own HTTP process, against payloads
signed by the official x402 client and with its answers parsed by the official models."""

from __future__ import annotations

import httpx
from eth_account import Account
from x402.schemas import SettleResponse, SupportedResponse, VerifyResponse

from buyer import Buyer
from offline_checks import base_usdc_challenge, signed_request
from suite import Suite, expect


def answer(response: httpx.Response, model):
    """The 200 body of `response`, validated strictly with an official model."""
    expect(response.status_code == 200,
           f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} {response.text[:200]}")
    return model.model_validate_json(response.content, strict=True)


def register(suite: Suite, sandbox_url: str) -> None:
    @suite.check("sandbox_facilitator_answers_official_payloads")
    async def _sandbox() -> None:
        buyer, merchant = Buyer(), Account.create().address
        body = await signed_request(buyer, base_usdc_challenge(merchant))
        with httpx.Client(base_url=sandbox_url, timeout=10) as http:
            supported = answer(http.get("/supported"), SupportedResponse)
            kinds = {(k.x402_version, k.scheme, k.network) for k in supported.kinds}
            expect((2, "exact", "eip155:8453") in kinds, f"/supported lacks exact on Base: {kinds}")
            verified = answer(http.post("/verify", json=body), VerifyResponse)
            expect(verified.is_valid and (verified.payer or "").lower() == buyer.address.lower(),
                   f"/verify of an official payload: {verified}")
            settled = answer(http.post("/settle", json=body), SettleResponse)
            expect(settled.success and settled.network == "eip155:8453" and len(settled.transaction) == 66,
                   f"/settle of an official payload: {settled}")
            again = answer(http.post("/settle", json=body), SettleResponse)
            expect(not again.success and again.transaction == "", f"the same authorization settled twice: {again}")
            forged = {**body, "paymentRequirements": {**body["paymentRequirements"], "payTo": buyer.address}}
            refused = answer(http.post("/verify", json=forged), VerifyResponse)
            expect(not refused.is_valid, f"a payment to another recipient verified: {refused}")
