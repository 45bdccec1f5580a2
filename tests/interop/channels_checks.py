"""Payment channels (`batch-settlement`): the official client's batch-settlement scheme
(`x402.mechanisms.evm.batch_settlement.client.BatchSettlementEvmScheme`) buys rows from the
crate's `examples/channels.rs`, which runs against the sandbox facilitator served as its own HTTP
process.

One deposit opens a buyer's channel, then each request is paid with a voucher the server checks
on its own; the server claims the vouchers in batches and sweeps them to its receiver. What the
server claims is read back from the sandbox facilitator's chain view (Ethereum JSON-RPC at
`POST {sandbox}/rpc`): the `x402BatchSettlement` contract's `channels(channelId)` and
`receivers(receiver, token)`, so the checks compare what the server says it charged with what
landed on chain. What a cooperative refund claims is swept right after it. A payer who withdraws
what was charged behind the server's back (`sandbox_initiateWithdraw`, `evm_increaseTime`,
`sandbox_finalizeWithdraw` on the sandbox's JSON-RPC) poisons the claim batch: the honest channels
beside it are still claimed and swept on SIGTERM. A server that watches the chain (`--rpc-url`)
claims a channel as soon as its payer starts a withdrawal, and serves no voucher on it once the
withdrawal has finalized. The example is started
with a claim interval longer than the suite, so the last check's SIGTERM is what claims and sweeps
every outstanding voucher.

The environment (set by `run.sh`): `X402_CHANNELS` (the example's URL), `X402_CHANNELS_PID` (its
process id, for the SIGTERM), `X402_CHANNELS_PAY_TO` (its `--pay-to`, a receiver no other
service uses), `X402_SANDBOX_FACILITATOR`; `X402_CHANNELS_LOST` and `X402_CHANNELS_LOST_RPC`: a
second `channels` example, with `--rpc-url`, against the faulty facilitator whose first `/settle`
settles and loses its answer, and that facilitator's chain view; `X402_CHANNELS_WATCH` and
`X402_CHANNELS_WATCH_PAY_TO`: a third `channels` example, with `--rpc-url` against the sandbox
facilitator's chain view, and its receiver.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http import (
    PAYMENT_REQUIRED_HEADER,
    PAYMENT_RESPONSE_HEADER,
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_signature_header,
)
from x402.http.clients.httpx import x402HttpxClient
from x402.mechanisms.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    MAX_WITHDRAW_DELAY,
    MIN_WITHDRAW_DELAY,
)
from x402.mechanisms.evm.batch_settlement.abi import BATCH_SETTLEMENT_ABI
from x402.mechanisms.evm.batch_settlement.client import BatchSettlementEvmScheme
from x402.mechanisms.evm.batch_settlement.client.voucher import sign_voucher
from x402.mechanisms.evm.batch_settlement.errors import ERR_CUMULATIVE_AMOUNT_MISMATCH
from x402.mechanisms.evm.signers import EthAccountSigner, EthAccountSignerWithRPC
from x402.schemas import PaymentPayload, PaymentRequired, SettleResponse, SupportedResponse

from ledger import BASE_USDC
from suite import Suite, expect

BASE = "eip155:8453"
SCHEME = "batch-settlement"
MAXIMUM = 10_000  # up to 0.01 USDC a request
ROW = 1_000  # 0.001 USDC a row
MOST_ROWS = MAXIMUM // ROW
TIMEOUT_SECONDS = 30.0


@dataclass
class Paid:
    """What one GET paid by the official client came back with."""

    response: httpx.Response
    settlement: SettleResponse | None
    signed: list[PaymentPayload] = field(default_factory=list)
    refused: list[PaymentRequired] = field(default_factory=list)


class ChannelBuyer:
    """A fresh key paying with the official batch-settlement client, only that scheme registered
    for Base; its signer reads the channel contract from the sandbox's chain view (the client's
    recovery after a corrective 402 needs it)."""

    def __init__(self, rpc_url: str) -> None:
        self.account = Account.create()
        self.scheme = BatchSettlementEvmScheme(EthAccountSignerWithRPC(self.account, rpc_url))
        self.client = x402Client()
        self.client.register(BASE, self.scheme)
        self._signed: list[PaymentPayload] = []
        self._refused: list[PaymentRequired] = []
        self.client.on_after_payment_creation(lambda ctx: self._signed.append(ctx.payment_payload))
        self.client.on_payment_response(self._seen)

    def _seen(self, ctx: Any) -> None:
        if ctx.payment_required is not None:
            self._refused.append(ctx.payment_required)

    @property
    def address(self) -> str:
        return self.account.address

    async def buy(self, url: str) -> Paid:
        first, refused = len(self._signed), len(self._refused)
        async with x402HttpxClient(self.client, timeout=TIMEOUT_SECONDS) as http:
            response = await http.get(url)
            await response.aread()
        encoded = response.headers.get(PAYMENT_RESPONSE_HEADER)
        settlement = decode_payment_response_header(encoded) if encoded else None
        return Paid(response, settlement, self._signed[first:], self._refused[refused:])


class Contract:
    """The sandbox's `x402BatchSettlement` on Base, read over its JSON-RPC chain view."""

    def __init__(self, rpc_url: str) -> None:
        self.reader = EthAccountSignerWithRPC(Account.create(), rpc_url)

    def _read(self, function: str, *args: Any) -> Any:
        return self.reader.read_contract(BATCH_SETTLEMENT_ADDRESS, BATCH_SETTLEMENT_ABI, function, *args)

    def channel(self, channel_id: str) -> tuple[int, int]:
        """`channels(channelId)`: (balance, totalClaimed)."""
        balance, total_claimed = self._read("channels", bytes.fromhex(channel_id.removeprefix("0x")))
        return int(balance), int(total_claimed)

    def receiver(self, receiver: str) -> tuple[int, int]:
        """`receivers(receiver, USDC)`: (totalClaimed, totalSettled)."""
        claimed, settled = self._read("receivers", receiver, BASE_USDC.address)
        return int(claimed), int(settled)


@dataclass
class Books:
    """What the checks bought, to compare with the chain once the server has claimed."""

    charged: dict[str, int] = field(default_factory=dict)  # channel id -> charged cumulative
    claimed_by_refunds: int = 0  # what the refunds claimed on their way
    poisoned: dict[str, int] = field(default_factory=dict)  # channel id -> charged beyond its balance


def chain_call(rpc_url: str, method: str, params: list[Any]) -> Any:
    """A JSON-RPC call to the sandbox's chain view; its result, or a failed check."""
    answer = httpx.post(rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=10).json()
    expect("result" in answer, f"{method}: {answer}")
    return answer["result"]


def rows_url(base: str, count: Any) -> str:
    return f"{base}/v1/rows?count={count}"


def channel_id_of(payload: PaymentPayload) -> str:
    return payload.payload["voucher"]["channelId"].lower()


def expect_rows(paid: Paid, count: int) -> None:
    response = paid.response
    expect(response.status_code == 200, f"HTTP {response.status_code} after paying: {response.text[:300]}")
    expect(response.json() == [{"row": n} for n in range(count)], f"the body is not {count} rows: {response.text[:300]}")


def expect_channel_response(paid: Paid, charged: int, cumulative: int, channel_id: str) -> dict[str, Any]:
    """The PAYMENT-RESPONSE extra common to deposits and vouchers: what this request was charged
    and the channel's new cumulative; returns the channel state."""
    settlement = paid.settlement
    expect(settlement is not None and settlement.success, f"PAYMENT-RESPONSE {settlement}")
    expect(settlement.network == BASE, f"PAYMENT-RESPONSE network {settlement.network}")
    extra = settlement.extra or {}
    expect(extra.get("chargedAmount") == str(charged), f"extra.chargedAmount {extra.get('chargedAmount')!r}, charged {charged}")
    state = extra.get("channelState")
    expect(isinstance(state, dict), f"extra.channelState {state!r}")
    expect(str(state.get("channelId", "")).lower() == channel_id,
           f"channelState.channelId {state.get('channelId')}, the voucher's {channel_id}")
    expect(state.get("chargedCumulativeAmount") == str(cumulative),
           f"channelState.chargedCumulativeAmount {state.get('chargedCumulativeAmount')!r}, expected {cumulative}")
    return state


def register(suite: Suite) -> None:
    channels = os.environ["X402_CHANNELS"]
    pid = int(os.environ["X402_CHANNELS_PID"])
    pay_to = os.environ["X402_CHANNELS_PAY_TO"]
    sandbox = os.environ["X402_SANDBOX_FACILITATOR"]
    rpc = f"{sandbox}/rpc"
    contract = Contract(rpc)
    books = Books()
    state: dict[str, Any] = {}

    @suite.check("channels_challenge_offers_batch_settlement")
    def _challenge() -> None:
        supported = SupportedResponse.model_validate_json(httpx.get(f"{sandbox}/supported", timeout=10).content)
        kinds = [k for k in supported.kinds if (k.x402_version, k.scheme, k.network) == (2, SCHEME, BASE)]
        expect(len(kinds) == 1, f"/supported lists {SCHEME} on Base {len(kinds)} times")
        authorizer = (kinds[0].extra or {}).get("receiverAuthorizer")
        response = httpx.get(rows_url(channels, 3), timeout=10)
        expect(response.status_code == 402, f"GET /v1/rows?count=3 unpaid: HTTP {response.status_code}")
        required = decode_payment_required_header(response.headers[PAYMENT_REQUIRED_HEADER])
        accepts = [(a.scheme, a.network, a.asset, a.amount, a.pay_to) for a in required.accepts]
        expect(accepts == [(SCHEME, BASE, BASE_USDC.address, str(MAXIMUM), pay_to)], f"the 402 offers {accepts}")
        extra = required.accepts[0].extra or {}
        expect(str(extra.get("receiverAuthorizer", "")).lower() == str(authorizer).lower(),
               f"extra.receiverAuthorizer {extra.get('receiverAuthorizer')}, the facilitator's {authorizer}")
        delay = extra.get("withdrawDelay")
        expect(isinstance(delay, int) and MIN_WITHDRAW_DELAY <= delay <= MAX_WITHDRAW_DELAY,
               f"extra.withdrawDelay {delay!r}")
        expect((extra.get("name"), extra.get("version")) == ("USD Coin", "2"), f"the token's EIP-712 domain in {extra}")

    @suite.check("channels_refuse_bad_counts_before_payment")
    def _bad_counts() -> None:
        for count in (MOST_ROWS + 1, 0, "abc", "-1"):
            response = httpx.get(rows_url(channels, count), timeout=10)
            expect(response.status_code == 400 and PAYMENT_REQUIRED_HEADER not in response.headers,
                   f"count={count}: HTTP {response.status_code} {dict(response.headers)}")
            body = response.json()
            expect(isinstance(body, dict) and isinstance(body.get("error"), str), f"count={count}: body {body}")

    @suite.check("channels_deposit_then_vouchers", "channels_challenge_offers_batch_settlement")
    async def _deposit_then_vouchers() -> None:
        buyer = ChannelBuyer(rpc)
        counts = [3, 1, 4, MOST_ROWS, 2, 7]
        cumulative = 0
        channel_id = ""
        deposited = 0
        for n, count in enumerate(counts):
            paid = await buyer.buy(rows_url(channels, count))
            expect_rows(paid, count)
            expect(len(paid.signed) == 1 and not paid.refused,
                   f"request {n}: the client signed {len(paid.signed)} payments and was refused {len(paid.refused)} times")
            payload = paid.signed[0]
            expect((payload.accepted.scheme, payload.accepted.amount) == (SCHEME, str(MAXIMUM)),
                   f"request {n}: the client signed {payload.accepted}")
            kind = payload.payload.get("type")
            voucher = payload.payload["voucher"]
            expect(voucher["maxClaimableAmount"] == str(cumulative + MAXIMUM),
                   f"request {n}: the voucher's ceiling {voucher['maxClaimableAmount']}, the cumulative {cumulative} + {MAXIMUM}")
            if n == 0:
                channel_id = channel_id_of(payload)
                expect(kind == "deposit", f"the first payment is a {kind}, not a deposit")
                deposited = int(payload.payload["deposit"]["amount"])
            else:
                expect(kind == "voucher", f"request {n} paid with a {kind}, not a voucher")
                expect(channel_id_of(payload) == channel_id, f"request {n} on another channel")
            cumulative += count * ROW
            books.charged[channel_id] = cumulative
            expect_channel_response(paid, count * ROW, cumulative, channel_id)
            settlement = paid.settlement
            if n == 0:
                # The deposit: its transaction and the amount deposited.
                expect(len(settlement.transaction) == 66 and settlement.amount == str(deposited),
                       f"the deposit's PAYMENT-RESPONSE: transaction {settlement.transaction!r}, amount {settlement.amount!r}, deposited {deposited}")
            else:
                # A voucher: nothing moved on chain, so an empty transaction and amount.
                expect(settlement.transaction == "" and settlement.amount == "",
                       f"request {n}: a voucher's PAYMENT-RESPONSE names transaction {settlement.transaction!r}, amount {settlement.amount!r}")
        balance, claimed = contract.channel(channel_id)
        expect((balance, claimed) == (deposited, 0),
               f"channels({channel_id}) is ({balance}, {claimed}), deposited {deposited}, nothing claimed yet")
        state["buyer"], state["cumulative"], state["channel"], state["deposited"] = buyer, cumulative, channel_id, deposited

    @suite.check("channels_corrective_402_resyncs_the_client", "channels_deposit_then_vouchers")
    async def _corrective() -> None:
        # The buyer's client forgets the last charge (a client state restored from a backup):
        # its next voucher is signed on a stale cumulative, the server answers the corrective 402
        # with its channel state and the buyer's own last voucher, and the official client checks
        # that signature, resyncs and pays again.
        buyer: ChannelBuyer = state["buyer"]
        channel_id: str = state["channel"]
        storage = buyer.scheme._storage
        record = storage.get(channel_id)
        expect(record is not None, "the client keeps no record of its channel")
        stale = state["cumulative"] - 2 * ROW
        record.charged_cumulative_amount = str(stale)
        storage.set(channel_id, record)
        paid = await buyer.buy(rows_url(channels, 5))
        expect_rows(paid, 5)
        books.charged[channel_id] = state["cumulative"] + 5 * ROW
        expect(len(paid.refused) == 1, f"{len(paid.refused)} corrective 402s, expected 1")
        corrective = paid.refused[0]
        expect(corrective.error == ERR_CUMULATIVE_AMOUNT_MISMATCH, f"the 402's error {corrective.error!r}")
        extra = corrective.accepts[0].extra or {}
        expect(extra.get("channelState", {}).get("chargedCumulativeAmount") == str(state["cumulative"]),
               f"the corrective 402's channelState {extra.get('channelState')}")
        voucher_state = extra.get("voucherState", {})
        expect(voucher_state.get("signedMaxClaimable") == str(state["cumulative"] - 7 * ROW + MAXIMUM),
               f"the corrective 402's voucherState {voucher_state}: not the last voucher accepted")
        expect([p.payload["voucher"]["maxClaimableAmount"] for p in paid.signed]
               == [str(stale + MAXIMUM), str(state["cumulative"] + MAXIMUM)],
               f"the client signed {[p.payload['voucher'] for p in paid.signed]}")
        state["cumulative"] += 5 * ROW
        expect_channel_response(paid, 5 * ROW, state["cumulative"], channel_id)

    @suite.check("channels_cooperative_refund", "channels_deposit_then_vouchers")
    def _refund() -> None:
        buyer = ChannelBuyer(rpc)
        counts = [2, 6]

        async def buy_some() -> str:
            channel = ""
            for count in counts:
                paid = await buyer.buy(rows_url(channels, count))
                expect_rows(paid, count)
                channel = channel_id_of(paid.signed[0])
            return channel

        channel_id = asyncio.run(buy_some())
        charged = sum(counts) * ROW
        books.charged[channel_id] = charged
        deposited, _ = contract.channel(channel_id)
        settlement = buyer.scheme.refund(rows_url(channels, 1))
        expect(settlement.success and len(settlement.transaction) == 66,
               f"the refund's PAYMENT-RESPONSE {settlement}")
        expect(settlement.amount == str(deposited - charged),
               f"refunded {settlement.amount!r}, deposited {deposited}, charged {charged}")
        state_extra = (settlement.extra or {}).get("channelState", {})
        expect(str(state_extra.get("channelId", "")).lower() == channel_id, f"the refund's channelState {state_extra}")
        _, claimed = contract.channel(channel_id)
        expect(claimed == charged, f"channels({channel_id}).totalClaimed {claimed} after the refund, charged {charged}")
        books.claimed_by_refunds += charged
        # What the refund claimed for the receiver is swept right after it, not left in the
        # contract.
        swept = contract.receiver(pay_to)
        expect(swept == (books.claimed_by_refunds, books.claimed_by_refunds),
               f"receivers({pay_to}) is (claimed, settled) {swept} after the refund; the refunds claimed {books.claimed_by_refunds}")
        state["refunded"] = (buyer, channel_id)

    @suite.check("channels_buy_again_after_a_full_refund", "channels_cooperative_refund")
    async def _again() -> None:
        # The same buyer comes back: the channel is empty, so it deposits again on the same
        # channel, and the server starts from what was claimed there.
        buyer, channel_id = state["refunded"]
        paid = await buyer.buy(rows_url(channels, 3))
        expect_rows(paid, 3)
        books.charged[channel_id] += 3 * ROW
        kinds = [p.payload.get("type") for p in paid.signed]
        expect(kinds == ["deposit"] and channel_id_of(paid.signed[0]) == channel_id,
               f"the client paid with {kinds} on {[channel_id_of(p) for p in paid.signed]}")
        expect_channel_response(paid, 3 * ROW, books.charged[channel_id], channel_id)

    @suite.check("channels_a_stranger_gets_no_state_and_refunds_nothing", "channels_deposit_then_vouchers")
    async def _stranger() -> None:
        # A buyer pays a full-price request: the voucher the server holds is signed on exactly
        # what was charged, as a refund's voucher is.
        buyer = ChannelBuyer(rpc)
        opened = await buyer.buy(rows_url(channels, 1))
        expect_rows(opened, 1)
        full = await buyer.buy(rows_url(channels, MOST_ROWS))
        expect_rows(full, MOST_ROWS)
        channel_id = channel_id_of(full.signed[-1])
        charged = ROW + MOST_ROWS * ROW
        books.charged[channel_id] = charged
        held = full.signed[-1].payload["voucher"]
        expect(held["maxClaimableAmount"] == str(charged), f"the full-price voucher {held}")
        config = full.signed[-1].payload["channelConfig"]
        accepted = full.signed[-1].accepted
        before = contract.channel(channel_id)

        def send(payload: dict[str, Any]) -> httpx.Response:
            payment = PaymentPayload(x402_version=2, accepted=accepted, payload=payload)
            headers = {"PAYMENT-SIGNATURE": encode_payment_signature_header(payment)}
            return httpx.get(rows_url(channels, 1), headers=headers, timeout=TIMEOUT_SECONDS)

        # A stranger's voucher on the buyer's channel: refused, and shown nothing of it.
        stranger = EthAccountSigner(Account.create())
        forged = sign_voucher(stranger, channel_id, MAXIMUM, BASE).to_dict()
        probed = send({"type": "voucher", "channelConfig": config, "voucher": forged})
        expect(probed.status_code == 402, f"a stranger's voucher: HTTP {probed.status_code}")
        required = decode_payment_required_header(probed.headers[PAYMENT_REQUIRED_HEADER])
        extra = required.accepts[0].extra or {}
        expect("channelState" not in extra and "voucherState" not in extra,
               f"a stranger was shown the channel: {extra}")
        expect(required.error != ERR_CUMULATIVE_AMOUNT_MISMATCH, f"the stranger's 402: {required.error}")
        # A refund carrying the voucher the server holds (what a corrective 402 used to hand
        # anyone): refused, nothing moves.
        refund = send({"type": "refund", "channelConfig": config, "voucher": held})
        expect(refund.status_code == 402, f"a replayed refund: HTTP {refund.status_code}")
        expect(PAYMENT_RESPONSE_HEADER not in refund.headers, f"a replayed refund settled: {dict(refund.headers)}")
        expect(contract.channel(channel_id) == before,
               f"channels({channel_id}) went from {before} to {contract.channel(channel_id)}")
        # The buyer goes on.
        more = await buyer.buy(rows_url(channels, 2))
        expect_rows(more, 2)
        books.charged[channel_id] = charged + 2 * ROW
        expect_channel_response(more, 2 * ROW, charged + 2 * ROW, channel_id)

    @suite.check("channels_a_lost_deposit_answer_ends_in_service_with_one_deposit")
    async def _lost_deposit() -> None:
        # The faulty facilitator settles the deposit and loses its answer: the example answers
        # 503 (never 402); the same deposit sent again is found on chain (--rpc-url) and served.
        lost_url = os.environ["X402_CHANNELS_LOST"]
        lost_chain = Contract(os.environ["X402_CHANNELS_LOST_RPC"])
        buyer = ChannelBuyer(os.environ["X402_CHANNELS_LOST_RPC"])
        first = await buyer.buy(rows_url(lost_url, 2))
        expect(first.response.status_code == 503,
               f"the deposit whose answer was lost: HTTP {first.response.status_code}")
        deposits = [p for p in first.signed if p.payload.get("type") == "deposit"]
        expect(len(deposits) == 1, f"the client signed {[p.payload.get('type') for p in first.signed]}")
        channel_id = channel_id_of(deposits[0])
        deposited, _ = lost_chain.channel(channel_id)
        expect(deposited > 0, "the deposit did not move")
        headers = {"PAYMENT-SIGNATURE": encode_payment_signature_header(deposits[0])}
        again = httpx.get(rows_url(lost_url, 2), headers=headers, timeout=TIMEOUT_SECONDS)
        expect(again.status_code == 200 and again.json() == [{"row": 0}, {"row": 1}],
               f"the same deposit sent again: HTTP {again.status_code} {again.text}")
        # The buyer's client, which never saw the deposit's answer, buys on: the server re-syncs
        # it rather than take a second deposit.
        more = await buyer.buy(rows_url(lost_url, 1))
        expect_rows(more, 1)
        balance, _ = lost_chain.channel(channel_id)
        expect(balance == deposited, f"channels({channel_id}).balance {balance}, one deposit of {deposited}")

    @suite.check("channels_a_watched_withdrawal_is_claimed_at_once")
    async def _withdrawing() -> None:
        # Against the example that watches the chain (--rpc-url): a buyer deposits and buys, then
        # starts a withdrawal of the whole deposit. The server sees it and claims what was
        # charged at once; once the delay passes the payer takes back the rest, and the buyer's
        # next voucher (signed on the channel as the official client signs it) is refused, not
        # served. Bought before the poison check moves the sandbox's clock (a deposit signed after
        # it is expired on the sandbox's chain); finalized after it.
        watched = os.environ["X402_CHANNELS_WATCH"]
        receiver = os.environ["X402_CHANNELS_WATCH_PAY_TO"]
        buyer = ChannelBuyer(rpc)
        counts = [3, 4]
        last: PaymentPayload | None = None
        config: dict[str, Any] = {}
        for count in counts:
            paid = await buyer.buy(rows_url(watched, count))
            expect_rows(paid, count)
            last = paid.signed[-1]
            config = last.payload.get("channelConfig") or config
        expect(last is not None and bool(config), "no payment carried a channelConfig")
        channel_id = channel_id_of(last)
        charged = sum(counts) * ROW
        deposited, claimed = contract.channel(channel_id)
        expect(claimed == 0 and deposited > charged, f"channels({channel_id}) is {(deposited, claimed)} before the withdrawal")
        chain_call(rpc, "sandbox_initiateWithdraw", [config, str(deposited), buyer.address])
        # The server watches its channels every 30 s and claims one with a pending withdrawal.
        deadline = time.monotonic() + 60
        while contract.channel(channel_id)[1] != charged:
            expect(time.monotonic() < deadline,
                   f"channels({channel_id}) is {contract.channel(channel_id)} 60 s after the withdrawal started; charged {charged}")
            await asyncio.sleep(0.5)
        state["withdrawing"] = (buyer, last, config, channel_id, charged, deposited)

    @suite.check("channels_a_payer_withdraws_what_was_charged", "channels_deposit_then_vouchers")
    async def _poison() -> None:
        # A payer buys 30 rows, then withdraws the whole deposit on chain behind the server's
        # back (the server has no chain reader to see it): the 30,000 charged are beyond the
        # channel's balance, and a claim of them reverts, with every channel batched beside it.
        # Run last before the SIGTERM: the sandbox's clock is moved past the withdrawal delay.
        buyer = ChannelBuyer(rpc)
        channel_id = ""
        config: dict[str, Any] = {}
        for _ in range(3):
            paid = await buyer.buy(rows_url(channels, MOST_ROWS))
            expect_rows(paid, MOST_ROWS)
            channel_id = channel_id_of(paid.signed[0])
            config = paid.signed[0].payload.get("channelConfig") or config
        expect(bool(config), "no deposit carried a channelConfig")
        deposited, claimed = contract.channel(channel_id)
        expect(claimed == 0 and deposited > 0, f"channels({channel_id}) is {(deposited, claimed)} before the withdrawal")
        chain_call(rpc, "sandbox_initiateWithdraw", [config, str(deposited), buyer.address])
        chain_call(rpc, "evm_increaseTime", [int(config["withdrawDelay"])])
        returned = chain_call(rpc, "sandbox_finalizeWithdraw", [config, buyer.address])
        expect(returned == str(deposited), f"finalizeWithdraw returned {returned!r} of {deposited}")
        expect(contract.channel(channel_id) == (0, 0), f"channels({channel_id}) after the withdrawal")
        books.poisoned[channel_id] = 3 * MAXIMUM

    @suite.check("channels_no_voucher_is_served_after_a_withdrawal_finalizes", "channels_a_watched_withdrawal_is_claimed_at_once")
    async def _withdrawn() -> None:
        watched = os.environ["X402_CHANNELS_WATCH"]
        receiver = os.environ["X402_CHANNELS_WATCH_PAY_TO"]
        buyer, last, config, channel_id, charged, deposited = state["withdrawing"]
        chain_call(rpc, "evm_increaseTime", [int(config["withdrawDelay"])])
        returned = chain_call(rpc, "sandbox_finalizeWithdraw", [config, buyer.address])
        expect(returned == str(deposited - charged), f"finalizeWithdraw returned {returned!r}: deposited {deposited}, claimed {charged}")
        after = contract.channel(channel_id)
        expect(after == (charged, charged), f"channels({channel_id}) is {after} after the withdrawal")
        # The buyer's next voucher: the official client's signature on the channel, one request on.
        voucher = sign_voucher(EthAccountSigner(buyer.account), channel_id, charged + MAXIMUM, BASE).to_dict()
        payment = PaymentPayload(x402_version=2, accepted=last.accepted,
                                 payload={"type": "voucher", "channelConfig": config, "voucher": voucher})
        headers = {"PAYMENT-SIGNATURE": encode_payment_signature_header(payment)}
        refused = httpx.get(rows_url(watched, 1), headers=headers, timeout=TIMEOUT_SECONDS)
        expect(refused.status_code == 402, f"a voucher after the withdrawal: HTTP {refused.status_code} {refused.text[:300]}")
        expect(PAYMENT_RESPONSE_HEADER not in refused.headers, f"a refused voucher settled: {dict(refused.headers)}")
        body = refused.json()
        expect(isinstance(body, dict) and isinstance(body.get("error"), str), f"the 402's body {body}")
        # The buyer's client buys on: it is never served on the withdrawn channel without paying.
        again = await buyer.buy(rows_url(watched, 1))
        if again.response.status_code == 200:
            kinds = [p.payload.get("type") for p in again.signed]
            expect("deposit" in kinds, f"served after the withdrawal on {kinds}, no new deposit")
        else:
            expect(again.response.status_code == 402, f"the client after the withdrawal: HTTP {again.response.status_code}")
        balance, total = contract.channel(channel_id)
        expect(total == charged and balance >= charged, f"channels({channel_id}) is {(balance, total)}; claimed {charged}")
        swept = contract.receiver(receiver)
        expect(swept[0] == charged, f"receivers({receiver}) is (claimed, settled) {swept}; charged {charged}")

    @suite.check("channels_sigterm_claims_and_sweeps_every_voucher", "channels_deposit_then_vouchers")
    def _sigterm() -> None:
        # Nothing is claimed before the SIGTERM but what the refund claimed (the interval is
        # longer than the suite); after it, every voucher is claimed and swept before exit.
        claimed_before, settled_before = contract.receiver(pay_to)
        expect(claimed_before == books.claimed_by_refunds,
               f"receivers({pay_to}).totalClaimed {claimed_before} before the SIGTERM, the refunds claimed {books.claimed_by_refunds}")
        expect(settled_before == claimed_before,
               f"receivers({pay_to}).totalSettled {settled_before} before the SIGTERM: what the refunds claimed is swept")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid):
            expect(time.monotonic() < deadline, "the example still runs 30 s after SIGTERM")
            time.sleep(0.1)
        for channel_id, charged in books.charged.items():
            _, claimed = contract.channel(channel_id)
            expect(claimed == charged, f"channels({channel_id}).totalClaimed {claimed}, charged {charged}")
        # The withdrawn channel is left unclaimed; every honest channel beside it is claimed.
        for channel_id in books.poisoned:
            expect(contract.channel(channel_id) == (0, 0), f"channels({channel_id}) after the SIGTERM")
        total = sum(books.charged.values())
        claimed, settled = contract.receiver(pay_to)
        expect((claimed, settled) == (total, total),
               f"receivers({pay_to}) is (claimed {claimed}, settled {settled}); charged {total} in all")


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
