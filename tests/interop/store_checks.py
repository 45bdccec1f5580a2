"""Checks against the running Rust store, with the official x402 Python SDK as the buyer
(and, for one store, as the facilitator)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
from x402.http import PAYMENT_REQUIRED_HEADER, decode_payment_required_header
from x402.http.utils import safe_base64_decode
from x402.schemas import PaymentRequired

from buyer import Buyer, Purchase
from facilitator import unknown_keys
from ledger import BASE_USDC
from mcp_client import McpSession
from suite import Suite, expect

SKU_COUNT = 45
BASE = "eip155:8453"


@dataclass(frozen=True)
class Services:
    """Where `run.sh` started everything."""

    demo_store: str  # embedded sandbox facilitator
    live_store: str  # sandbox facilitator as a separate HTTP process
    python_store: str  # the Python facilitator of facilitator.py
    python_facilitator: str
    sandbox_facilitator: str
    pay_to: str  # STORE_PAY_TO of the two live stores
    slug_prefix: str

    @classmethod
    def from_env(cls) -> "Services":
        return cls(
            demo_store=os.environ["X402_DEMO_STORE"],
            live_store=os.environ["X402_LIVE_STORE"],
            python_store=os.environ["X402_PYTHON_STORE"],
            python_facilitator=os.environ["X402_PYTHON_FACILITATOR"],
            sandbox_facilitator=os.environ["X402_SANDBOX_FACILITATOR"],
            pay_to=os.environ["X402_PAY_TO"],
            slug_prefix=os.environ.get("X402_SLUG_PREFIX", "store"),
        )

    def paid_url(self, store: str, suffix: str) -> str:
        return f"{store}/api/x402/{self.slug_prefix}-{suffix}"


def passport_id(purchase: Purchase) -> str:
    """The Passport id in a paid 200 body."""
    body = purchase.body if isinstance(purchase.body, dict) else {}
    citation = body.get("passport")
    expect(isinstance(citation, dict) and isinstance(citation.get("passport"), str),
           f"no passport.passport in the paid body: {purchase.describe()}")
    return citation["passport"]


def expect_settled(purchase: Purchase, buyer: Buyer, pay_to: str | None) -> None:
    """A 200 whose `PAYMENT-RESPONSE` (decoded by the official helper) is a success paid by `buyer`."""
    expect(purchase.status == 200, f"expected 200 after paying: {purchase.describe()}")
    expect(len(purchase.signed) == 1, f"the client signed {len(purchase.signed)} payments, expected 1")
    settlement = purchase.settlement
    expect(settlement is not None, "no PAYMENT-RESPONSE header on the paid response")
    expect(settlement.success, f"PAYMENT-RESPONSE says not settled: {settlement}")
    expect((settlement.payer or "").lower() == buyer.address.lower(), f"payer {settlement.payer} is not {buyer.address}")
    expect(settlement.network == BASE, f"settled on {settlement.network}")
    expect(settlement.transaction.startswith("0x") and len(settlement.transaction) == 66,
           f"transaction {settlement.transaction!r} is not a 32-byte hash")
    accepted = purchase.signed[0].accepted
    expect((accepted.network, accepted.asset, accepted.amount) == (BASE, BASE_USDC.address, "1000000"),
           f"the client paid {accepted.amount} of {accepted.asset} on {accepted.network}")
    if pay_to is not None:
        expect(accepted.pay_to == pay_to, f"paid to {accepted.pay_to}, STORE_PAY_TO is {pay_to}")


def expect_passport(store: str, purchase: Purchase, status: str) -> None:
    """`GET /api/passport/{id}` shows `status`; with the buyer's fulfillment key, also the
    settlement's transaction (never without it)."""
    ident = passport_id(purchase)
    public = httpx.get(f"{store}/api/passport/{ident}", timeout=10)
    expect(public.status_code == 200, f"GET /api/passport/{ident}: HTTP {public.status_code} {public.text[:200]}")
    expect("transaction" not in public.json().get("settlement", {}),
           "public Passport verification shows the settlement transaction")
    files = purchase.body.get("fulfillment", []) if isinstance(purchase.body, dict) else []
    expect(bool(files) and "key=" in files[0].get("url", ""), f"no fulfillment URL: {purchase.describe()}")
    key = files[0]["url"].rsplit("key=", 1)[1]
    response = httpx.get(f"{store}/api/passport/{ident}", params={"key": key}, timeout=10)
    expect(response.status_code == 200, f"GET /api/passport/{ident}: HTTP {response.status_code} {response.text[:200]}")
    record = response.json()
    expect(record.get("status") == status, f"Passport status {record.get('status')!r}, expected {status!r}")
    expect(record["passport"].get("demo") is (status == "demo"), f"Passport demo flag {record['passport'].get('demo')}")
    expect(record["passport"].get("passport") == ident, "the record names another Passport")
    transaction = record.get("settlement", {}).get("transaction")
    expect(transaction == purchase.settlement.transaction,
           f"Passport transaction {transaction} differs from PAYMENT-RESPONSE {purchase.settlement.transaction}")


def referred(store: str) -> int:
    """The live `referred` count reported by MCP `get_standing`."""
    with McpSession(f"{store}/mcp") as mcp:
        report = mcp.call_tool("get_standing", {})
    stages = {s["stage"]: s["count"] for s in report.get("stages", [])}
    expect("referred" in stages, f"get_standing has no referred stage: {json.dumps(report)[:300]}")
    return stages["referred"]


def check_challenge(http: httpx.Client, store: str, listed: dict[str, Any]) -> str | None:
    """Why the SKU's 402 does not parse with the official model (None when it does)."""
    slug = listed["sku"]["slug"]
    response = http.get(f"{store}/api/x402/{slug}")
    if response.status_code != 402:
        return f"{slug}: HTTP {response.status_code}"
    header = response.headers.get(PAYMENT_REQUIRED_HEADER)
    if not header:
        return f"{slug}: no {PAYMENT_REQUIRED_HEADER} header"
    try:
        required = decode_payment_required_header(header)
        text = safe_base64_decode(header)  # the exact JSON the store sent
        strict = PaymentRequired.model_validate_json(text, strict=True)
    except Exception as error:
        return f"{slug}: {type(error).__name__}: {' '.join(str(error).split())[:160]}"
    if not isinstance(required, PaymentRequired) or required.x402_version != 2:
        return f"{slug}: decoded as {type(required).__name__} version {required.x402_version}"
    strays = unknown_keys(json.loads(text), strict.model_dump(mode="json", by_alias=True, exclude_unset=True))
    if strays:
        return f"{slug}: keys unknown to the official model: {strays}"
    price = Decimal(listed["sku"]["price"]["amount"])
    canonical = [a for a in required.accepts if a.scheme == "exact" and a.network == BASE]
    if not canonical or canonical[0].asset != BASE_USDC.address or int(canonical[0].amount) != price * 1_000_000:
        return f"{slug}: no exact {BASE} USDC accept for {price}: {required.accepts}"
    if not required.resource or not required.resource.url.endswith(f"/api/x402/{slug}"):
        return f"{slug}: resource.url {required.resource.url if required.resource else None}"
    listed_accepts = json.loads(json.dumps(listed["accepts"]))
    sent_accepts = json.loads(text)["accepts"]
    if listed_accepts != sent_accepts:
        return f"{slug}: /.well-known/x402.json lists other accepts than the 402 sends"
    return None


def register(suite: Suite, services: Services) -> None:
    purchases: dict[str, Purchase] = {}

    @suite.check("every_sku_402_parses_with_official_model")
    def _catalog() -> None:
        with httpx.Client(timeout=10) as http:
            document = http.get(f"{services.demo_store}/.well-known/x402.json").json()
            listed = document["resources"]
            slugs = {entry["sku"]["slug"] for entry in listed}
            expect(len(listed) == SKU_COUNT and len(slugs) == SKU_COUNT,
                   f"/.well-known/x402.json lists {len(listed)} resources ({len(slugs)} slugs), expected {SKU_COUNT}")
            problems = [p for p in (check_challenge(http, services.demo_store, e) for e in listed) if p]
        expect(not problems, f"{len(problems)} of {SKU_COUNT} challenges fail: {problems[:3]}")

    @suite.check("official_client_buys_through_embedded_sandbox")
    async def _buy_demo() -> None:
        buyer = Buyer()
        purchase = await buyer.buy(services.paid_url(services.demo_store, "rail-receipt"))
        expect_settled(purchase, buyer, pay_to=None)
        purchases["demo"] = purchase

    @suite.check("demo_passport_matches_settlement", "official_client_buys_through_embedded_sandbox")
    def _demo_passport() -> None:
        expect_passport(services.demo_store, purchases["demo"], "demo")

    @suite.check("official_client_buys_through_sandbox_facilitator_process")
    async def _buy_live() -> None:
        buyer = Buyer()
        purchase = await buyer.buy(services.paid_url(services.live_store, "rail-receipt"))
        expect_settled(purchase, buyer, pay_to=services.pay_to)
        purchases["live"] = purchase

    @suite.check("live_passport_matches_settlement", "official_client_buys_through_sandbox_facilitator_process")
    def _live_passport() -> None:
        expect_passport(services.live_store, purchases["live"], "live")

    @suite.check("second_buyer_citation_counts_as_referred", "live_passport_matches_settlement")
    async def _referral() -> None:
        before = referred(services.live_store)
        expect(before == 0, f"referred is {before} before any citation")
        buyer = Buyer()
        cited = passport_id(purchases["live"])
        purchase = await buyer.buy(
            services.paid_url(services.live_store, "rail-receipt"), headers={"X-REFERRER-PASSPORT": cited}
        )
        expect_settled(purchase, buyer, pay_to=services.pay_to)
        answer = purchase.body.get("referral", {}) if isinstance(purchase.body, dict) else {}
        expect(answer.get("cited") == cited and answer.get("counted") is True,
               f"the paid body says of the citation: {answer}")
        after = referred(services.live_store)
        expect(after == 1, f"referred is {after} after one citation of {cited}")

    @suite.check("python_facilitator_sees_valid_bodies_and_purchase_succeeds")
    async def _python_facilitator() -> None:
        buyer = Buyer()
        with httpx.Client(base_url=services.python_facilitator, timeout=10) as http:
            http.post("/_fund", json={"address": buyer.address, "amount": "10000000"}).raise_for_status()
            purchase = await buyer.buy(services.paid_url(services.python_store, "rail-receipt"))
            observed = http.get("/_observed").json()
        invalid = [o for o in observed if not o["valid_body"]]
        expect(not invalid, f"bodies the official models refused: {[o['errors'][:300] for o in invalid]}")
        mine = [o for o in observed if (o.get("payer") or "").lower() == buyer.address.lower()]
        endpoints = [o["endpoint"] for o in mine]
        # The store settles before it delivers: `/settle` alone, which the official scheme verifies.
        expect(endpoints == ["/settle"], f"the store called {endpoints} for this payment")
        for call in mine:
            expect(call["accepted_matches_requirements"], f"{call['endpoint']}: accepted differs from paymentRequirements")
            expect(call["body"]["paymentRequirements"]["payTo"] == services.pay_to,
                   f"{call['endpoint']}: payTo {call['body']['paymentRequirements']['payTo']}")
        expect(mine[0]["result"].get("success") is True, f"/settle answered {mine[0]['result']}")
        expect_settled(purchase, buyer, pay_to=services.pay_to)
        expect(purchase.settlement.transaction == mine[0]["result"]["transaction"],
               "PAYMENT-RESPONSE carries another transaction than the facilitator settled")
        expect_passport(services.python_store, purchase, "live")

    @suite.check("python_facilitator_refusal_keeps_the_paywall")
    async def _python_refusal() -> None:
        buyer = Buyer()  # never funded: the official scheme must refuse, and the store with it
        purchase = await buyer.buy(services.paid_url(services.python_store, "rail-receipt"))
        with httpx.Client(base_url=services.python_facilitator, timeout=10) as http:
            observed = http.get("/_observed").json()
        mine = [o for o in observed if (o.get("payer") or "").lower() == buyer.address.lower()]
        expect([o["endpoint"] for o in mine] == ["/settle"], f"the store called {[o['endpoint'] for o in mine]}")
        expect(mine[0]["result"].get("success") is False
               and mine[0]["result"].get("errorReason") == "invalid_exact_evm_insufficient_balance",
               f"/settle answered {mine[0]['result']}")
        expect(purchase.status == 402, f"an unfunded payment got {purchase.describe()}")
        expect(purchase.settlement is None or not purchase.settlement.success, "a refused payment reported settled")
