"""Sign-in-with-x (SIWX) with the official package's `x402.extensions.sign_in_with_x`, both ways.

- The official client side signs in to the store: a buyer pays a SKU through the Python
  facilitator, then answers a fresh 402's `sign-in-with-x` challenge with `create_siwx_payload`
  and `encode_siwx_header` and is served the same Passport without a facilitator call; another
  account's proof and the same proof sent again are refused with their codes.
- The official server side accepts the crate's proofs: the `siwx-proof` binary of `x402-buyer` (the sandbox
  wallet) answers a challenge, and the proof passes `parse_siwx_header`,
  `validate_siwx_message` and `verify_siwx_signature` (what the official server hook runs);
  a tampered proof does not.

The environment (set by `run.sh`): the stores' URLs as `store_checks.Services` reads them,
`X402_SIWX_PROOF` (the `siwx-proof` binary of `x402-buyer`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import httpx
from eth_account import Account
from x402.extensions.sign_in_with_x import (
    SIGN_IN_WITH_X,
    create_siwx_payload,
    encode_siwx_header,
    parse_siwx_header,
    validate_siwx_message,
    verify_siwx_signature,
)
from x402.http import PAYMENT_REQUIRED_HEADER, decode_payment_required_header
from x402.http.utils import safe_base64_decode, safe_base64_encode

from buyer import Buyer
from store_checks import Services, expect_settled, passport_id
from suite import Suite, expect

SKU = "rail-receipt"
ORDER_WAIT_SECONDS = 10.0


def challenge(url: str) -> dict[str, Any]:
    """The `sign-in-with-x` extension of a fresh 402 for `url`, decoded with the official helper."""
    response = httpx.get(url, timeout=10)
    expect(response.status_code == 402, f"GET {url} without payment: HTTP {response.status_code}")
    header = response.headers.get(PAYMENT_REQUIRED_HEADER)
    expect(bool(header), f"no {PAYMENT_REQUIRED_HEADER} header on the 402")
    required = decode_payment_required_header(header)
    extension = (required.extensions or {}).get(SIGN_IN_WITH_X)
    expect(isinstance(extension, dict), f"the 402 has no {SIGN_IN_WITH_X} extension: {required.extensions}")
    return extension


async def official_proof(extension: dict[str, Any], account: Any, url: str) -> str:
    """The `SIGN-IN-WITH-X` header the official client builds for `account`, choosing the chain
    as its client hook does (the first supported chain of the signer's signature type)."""
    chain = next((c for c in extension.get("supportedChains", []) if c.get("type") == "eip191"), None)
    expect(chain is not None, f"no eip191 chain in supportedChains: {extension.get('supportedChains')}")
    complete = {**extension["info"], "chainId": chain["chainId"], "type": chain["type"]}
    payload = await create_siwx_payload(complete, account, url)
    return encode_siwx_header(payload)


def sign_in(url: str, header: str) -> tuple[int, Any]:
    """GETs `url` with the proof: (status, JSON body or None)."""
    response = httpx.get(url, headers={SIGN_IN_WITH_X: header}, timeout=10)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


def expect_refused(status: int, body: Any, code: str) -> None:
    """A 402 whose JSON `error` is `code` (optionally followed by `: detail`)."""
    error = body.get("error") if isinstance(body, dict) else None
    expect(status == 402, f"expected 402 {code}, got HTTP {status} {json.dumps(body)[:300]}")
    expect(isinstance(error, str) and error.split(":", 1)[0] == code, f"expected error {code}, got {error!r}")


def wait_for_order(store: str, ident: str) -> None:
    """Waits until the store has recorded the Passport `ident` (the order is written in the
    background after the paid answer)."""
    deadline = time.monotonic() + ORDER_WAIT_SECONDS
    while True:
        if httpx.get(f"{store}/api/passport/{ident}", timeout=10).status_code == 200:
            return
        expect(time.monotonic() < deadline, f"Passport {ident} not recorded within {ORDER_WAIT_SECONDS} s")
        time.sleep(0.1)


def sandbox_proof(extension: dict[str, Any], private_key: str) -> str:
    """The `SIGN-IN-WITH-X` header the `siwx-proof` binary prints for `extension`."""
    done = subprocess.run(
        [os.environ["X402_SIWX_PROOF"], "--private-key", private_key],
        input=json.dumps(extension),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    expect(done.returncode == 0, f"siwx-proof exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


async def official_verdict(header: str, origin: str) -> tuple[str | None, str | None]:
    """What the official server hook decides of `header`: (refusal code or None, payer)."""
    payload = parse_siwx_header(header)
    validation = await validate_siwx_message(payload, origin)
    if not validation.is_valid:
        return validation.invalid_reason, None
    verification = await verify_siwx_signature(payload)
    if not verification.is_valid:
        return verification.invalid_reason, None
    return None, verification.payer


def tampered(header: str, field: str, value: str) -> str:
    """`header` with one field of the proof changed (the signature kept)."""
    proof = json.loads(safe_base64_decode(header))
    expect(proof.get(field) != value, f"the proof already has {field} = {value!r}")
    proof[field] = value
    return safe_base64_encode(json.dumps(proof))


def register(suite: Suite, services: Services) -> None:
    url = services.paid_url(services.python_store, SKU)
    session: dict[str, Any] = {}

    @suite.check("official_siwx_client_signs_in_without_paying_again")
    async def _sign_in() -> None:
        buyer = Buyer()
        with httpx.Client(base_url=services.python_facilitator, timeout=10) as facilitator:
            facilitator.post("/_fund", json={"address": buyer.address, "amount": "10000000"}).raise_for_status()
            purchase = await buyer.buy(url)
            expect_settled(purchase, buyer, pay_to=services.pay_to)
            ident = passport_id(purchase)
            wait_for_order(services.python_store, ident)
            calls_before = len(facilitator.get("/_observed").json())
            header = await official_proof(challenge(url), buyer.account, url)
            status, body = sign_in(url, header)
            calls_after = facilitator.get("/_observed").json()
        expect(status == 200, f"signed in: HTTP {status} {json.dumps(body)[:300]}")
        served = body.get("passport", {}).get("passport") if isinstance(body, dict) else None
        expect(served == ident, f"signed in, served Passport {served!r}, bought {ident!r}")
        new_calls = [call["endpoint"] for call in calls_after[calls_before:]]
        expect(not new_calls, f"signing in called the facilitator: {new_calls}")
        session["header"] = header

    @suite.check("official_siwx_proof_of_another_account_is_not_entitled")
    async def _not_entitled() -> None:
        stranger = Account.create()
        header = await official_proof(challenge(url), stranger, url)
        status, body = sign_in(url, header)
        expect_refused(status, body, "invalid_siwx_not_entitled")

    @suite.check("official_siwx_proof_sent_again_is_refused", "official_siwx_client_signs_in_without_paying_again")
    def _replay() -> None:
        status, body = sign_in(url, session["header"])
        expect_refused(status, body, "invalid_siwx_nonce_used")

    @suite.check("official_siwx_verification_accepts_sandbox_wallet_proof")
    async def _sandbox_proof_accepted() -> None:
        account = Account.create()
        header = sandbox_proof(challenge(url), account.key.hex())
        code, payer = await official_verdict(header, services.python_store)
        expect(code is None, f"the official verification refused the sandbox wallet's proof: {code}")
        expect(payer == account.address, f"verified payer {payer}, the key's address is {account.address}")
        session["sandbox_header"] = header

    @suite.check(
        "official_siwx_verification_refuses_tampered_sandbox_proof",
        "official_siwx_verification_accepts_sandbox_wallet_proof",
    )
    async def _sandbox_proof_tampered() -> None:
        header = session["sandbox_header"]
        other = Account.create().address
        for field, value in (("address", other), ("nonce", "0" * 40), ("uri", f"{url}?copy=1")):
            code, _ = await official_verdict(tampered(header, field, value), services.python_store)
            expect(code == "invalid_siwx_signature", f"{field} changed: the official verification says {code}")
