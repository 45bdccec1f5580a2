"""Checks of the Python side alone: the official models against the specification's vectors,
and the Python facilitator against payloads signed by the official client.

They prove the instruments are sound before the Rust side is measured with them: the
facilitator accepts what the official client signs and refuses malformed bodies.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from eth_account import Account
from x402.http import (
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_required_header,
    encode_payment_response_header,
)
from x402.mechanisms.evm import hash_eip3009_authorization
from x402.mechanisms.evm.types import ExactEIP3009Payload, TypedDataDomain, TypedDataField
from x402.schemas import (
    PaymentPayload,
    PaymentRequired,
    SettleResponse,
    SupportedResponse,
    VerifyResponse,
)

from buyer import Buyer
from facilitator import serve
from ledger import BASE_USDC, LedgerSigner, UsdcLedger
from suite import Suite, expect

VECTORS = json.loads((Path(__file__).parent / "vectors.json").read_text())
EIP3009_FIELDS = ["from", "to", "value", "validAfter", "validBefore", "nonce"]
UINT_FIELDS = {"value", "validAfter", "validBefore"}


def strict(model, data):
    """Validates `data` strictly with an official model."""
    return model.model_validate_json(json.dumps(data), strict=True)


def base_usdc_challenge(pay_to: str, amount: str = "1000000") -> PaymentRequired:
    """A challenge for Base USDC as a server would send it."""
    return PaymentRequired(
        resource={"url": "http://127.0.0.1/paid", "description": "test", "mimeType": "application/json"},
        accepts=[
            {
                "scheme": "exact",
                "network": "eip155:8453",
                "amount": amount,
                "asset": BASE_USDC.address,
                "payTo": pay_to,
                "maxTimeoutSeconds": 300,
                "extra": {"name": BASE_USDC.name, "version": BASE_USDC.version},
            }
        ],
    )


async def signed_request(buyer: Buyer, challenge: PaymentRequired) -> dict:
    """A `/verify` body for a payment the official client signed for `challenge`."""
    payload = await buyer.client.create_payment_payload(challenge)
    return {
        "x402Version": 2,
        "paymentPayload": payload.model_dump(mode="json", by_alias=True, exclude_none=True),
        "paymentRequirements": challenge.accepts[0].model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def register(suite: Suite) -> None:
    @suite.check("official_models_parse_spec_vectors")
    def _models() -> None:
        required = strict(PaymentRequired, VECTORS["paymentRequired"])
        expect(required.accepts[0].pay_to == VECTORS["paymentRequired"]["accepts"][0]["payTo"], "payTo lost")
        payload = strict(PaymentPayload, VECTORS["paymentPayload"])
        expect(payload.accepted.amount == "10000", "accepted.amount lost")
        expect(strict(SettleResponse, VECTORS["settleSuccess"]).success, "settle success vector")
        expect(strict(SettleResponse, VECTORS["settleFailure"]).error_reason == "insufficient_funds", "settle failure vector")
        expect(strict(VerifyResponse, VECTORS["verifyValid"]).is_valid, "verify vector")
        expect(len(strict(SupportedResponse, VECTORS["supported"]).kinds) == 2, "supported vector")
        header = encode_payment_required_header(required)
        expect(decode_payment_required_header(header) == required, "PAYMENT-REQUIRED header round trip")
        settled = strict(SettleResponse, VECTORS["settleSuccess"])
        expect(decode_payment_response_header(encode_payment_response_header(settled)) == settled, "PAYMENT-RESPONSE round trip")

    @suite.check("official_eip712_digest_and_eth_account_recovery")
    def _digest() -> None:
        vector = VECTORS["paymentPayload"]
        evm = ExactEIP3009Payload.from_dict(vector["payload"])
        asset = vector["accepted"]["asset"]
        digest = hash_eip3009_authorization(evm.authorization, 84532, asset, "USDC", "2")
        expect("0x" + digest.hex() == VECTORS["eip712Digest"], f"digest {digest.hex()} differs from the vector")
        signer = LedgerSigner(UsdcLedger.with_tokens(BASE_USDC), chain_id=84532)
        auth = vector["payload"]["authorization"]
        message = {k: int(auth[k]) if k in UINT_FIELDS else auth[k] for k in EIP3009_FIELDS}
        message["nonce"] = bytes.fromhex(auth["nonce"][2:])
        types = {"TransferWithAuthorization": [TypedDataField(name=k, type=t) for k, t in zip(
            EIP3009_FIELDS, ["address", "address", "uint256", "uint256", "uint256", "bytes32"])]}
        signature = bytes.fromhex(vector["payload"]["signature"][2:])

        def recovers(name: str) -> bool:
            domain = TypedDataDomain(name=name, version="2", chain_id=84532, verifying_contract=asset)
            return signer.verify_typed_data(auth["from"], domain, types, "TransferWithAuthorization", message, signature)

        expect(recovers("USDC"), "the specification's signature does not recover to its payer")
        expect(not recovers("USD Coin"), "a wrong EIP-712 domain name still verified")

    @suite.check("python_facilitator_verifies_and_settles_official_payloads")
    async def _facilitator_accepts() -> None:
        server, state = serve()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            buyer, merchant = Buyer(), Account.create().address
            challenge = base_usdc_challenge(merchant)
            body = await signed_request(buyer, challenge)
            with httpx.Client(base_url=base, timeout=10) as http:
                supported = http.get("/supported").json()
                kinds = [(k["x402Version"], k["scheme"], k["network"]) for k in supported["kinds"]]
                expect(kinds == [(2, "exact", "eip155:8453")], f"/supported kinds {kinds}")
                unfunded = http.post("/verify", json=body).json()
                expect(unfunded == {"isValid": False, "invalidReason": "invalid_exact_evm_insufficient_balance",
                                    "invalidMessage": unfunded.get("invalidMessage"), "payer": buyer.address},
                       f"unfunded payer: {unfunded}")
                http.post("/_fund", json={"address": buyer.address, "amount": "5000000"}).raise_for_status()
                verified = http.post("/verify", json=body).json()
                expect(verified == {"isValid": True, "payer": buyer.address}, f"verify: {verified}")
                settled = http.post("/settle", json=body).json()
                expect(settled.get("success") is True, f"settle: {settled}")
                expect(len(settled.get("transaction", "")) == 66, f"transaction hash {settled.get('transaction')}")
                again = http.post("/settle", json=body).json()
                expect(again.get("success") is False, f"the same authorization settled twice: {again}")
                expect(state.ledger.balance(BASE_USDC.address, merchant) == 1_000_000, "merchant not credited once")
                wrong_amount = json.loads(json.dumps(body))
                wrong_amount["paymentRequirements"]["amount"] = "2000000"
                mismatch = http.post("/verify", json=wrong_amount).json()
                expect(mismatch.get("isValid") is False, f"amount mismatch verified: {mismatch}")
                forged = json.loads(json.dumps(body))
                forged["paymentPayload"]["payload"]["authorization"]["value"] = "1000001"
                forged["paymentRequirements"]["amount"] = "1000001"
                refused = http.post("/verify", json=forged).json()
                expect(refused.get("invalidReason") == "invalid_exact_evm_payload_signature",
                       f"an altered authorization verified: {refused}")
        finally:
            server.shutdown()

    @suite.check("python_facilitator_rejects_malformed_bodies")
    async def _facilitator_rejects() -> None:
        server, state = serve()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            body = await signed_request(Buyer(), base_usdc_challenge(Account.create().address))
            slip = json.loads(json.dumps(body))
            slip["paymentRequirements"]["payTO"] = slip["paymentRequirements"].pop("payTo")
            stray = json.loads(json.dumps(body))
            stray["paymentPayload"]["accepted"]["maxTimeoutSecs"] = 60
            number_amount = json.loads(json.dumps(body))
            number_amount["paymentRequirements"]["amount"] = 1000000
            cases = {"payTO": slip, "unknown key": stray, "amount as number": number_amount}
            with httpx.Client(base_url=base, timeout=10) as http:
                for label, bad in cases.items():
                    for endpoint in ("/verify", "/settle"):
                        response = http.post(endpoint, json=bad)
                        expect(response.status_code == 400, f"{label} on {endpoint}: HTTP {response.status_code}")
                observed = http.get("/_observed").json()
            expect(len(observed) == 6 and not any(o["valid_body"] for o in observed),
                   f"failures not recorded: {observed}")
        finally:
            server.shutdown()
