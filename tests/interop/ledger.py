"""An in-memory USDC ledger and a facilitator signer backed by it (no chain).

The official x402 `ExactEvmScheme` facilitator talks to the chain only through the
`FacilitatorEvmSigner` protocol. `LedgerSigner` implements the calls that EIP-3009
verification and settlement make:

- `get_code`: token contracts the ledger knows have bytecode; every other address is an EOA.
- `read_contract("transferWithAuthorization", ...)`: a dry run against the ledger (the
  scheme's transfer simulation), plus `balanceOf`, `authorizationState`, `name`, `version`.
- `write_contract("transferWithAuthorization", ...)`: applies the transfer and records a
  receipt carrying the ERC-20 `Transfer` log the scheme checks after settlement.
- `verify_typed_data`: EIP-712 recovery with `eth_account`.

The ledger enforces what the token contract would: the EIP-712 signature (recovered with
`eth_account`), the validity window, single use of each nonce, and the payer's balance.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from eth_account import Account
from eth_account.messages import encode_typed_data
from x402.mechanisms.evm.types import TransactionReceipt, TypedDataDomain, TypedDataField
from x402.mechanisms.evm.utils import normalize_address

# keccak256("Transfer(address,address,uint256)")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

TRANSFER_WITH_AUTHORIZATION_TYPES = [
    {"name": "from", "type": "address"},
    {"name": "to", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "validAfter", "type": "uint256"},
    {"name": "validBefore", "type": "uint256"},
    {"name": "nonce", "type": "bytes32"},
]

DOMAIN_FIELDS = {
    "name": {"name": "name", "type": "string"},
    "version": {"name": "version", "type": "string"},
    "chainId": {"name": "chainId", "type": "uint256"},
    "verifyingContract": {"name": "verifyingContract", "type": "address"},
}


class ContractRevert(Exception):
    """A call the token contract would revert; the message mimics FiatToken's reasons."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"execution reverted: {reason}")


@dataclass(frozen=True)
class Token:
    """An EIP-3009 token deployment: its EIP-712 domain."""

    name: str
    version: str
    chain_id: int
    address: str


BASE_USDC = Token("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
BASE_SEPOLIA_USDC = Token("USDC", "2", 84532, "0x036CbD53842c5426634e7929541eC2318f3dCF7e")


def recover_typed_data_signer(
    domain: dict[str, Any],
    types: dict[str, list[dict[str, str]]],
    primary_type: str,
    message: dict[str, Any],
    signature: bytes,
) -> str:
    """The checksummed address that produced `signature` over the EIP-712 typed data."""
    domain_types = [DOMAIN_FIELDS[key] for key in DOMAIN_FIELDS if key in domain]
    full = {
        "types": {"EIP712Domain": domain_types, **types},
        "primaryType": primary_type,
        "domain": domain,
        "message": message,
    }
    return Account.recover_message(encode_typed_data(full_message=full), signature=signature)


def _domain_dict(domain: TypedDataDomain | dict[str, Any]) -> dict[str, Any]:
    if isinstance(domain, dict):
        return domain
    out: dict[str, Any] = {"name": domain.name}
    if domain.version:
        out["version"] = domain.version
    out["chainId"] = domain.chain_id
    out["verifyingContract"] = domain.verifying_contract
    return out


def _fields(types: dict[str, list[TypedDataField]] | dict[str, list[dict[str, str]]]):
    out: dict[str, list[dict[str, str]]] = {}
    for name, entries in types.items():
        out[name] = [
            e if isinstance(e, dict) else {"name": e.name, "type": e.type} for e in entries
        ]
    return out


@dataclass
class _Transfer:
    token: str
    sender: str
    to: str
    value: int


@dataclass
class UsdcLedger:
    """Balances and used EIP-3009 nonces per token, guarded by one lock."""

    tokens: dict[str, Token] = field(default_factory=dict)
    balances: dict[tuple[str, str], int] = field(default_factory=dict)
    used_nonces: set[tuple[str, str, bytes]] = field(default_factory=set)
    transfers: list[_Transfer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def with_tokens(cls, *tokens: Token) -> "UsdcLedger":
        """A ledger that knows `tokens` and holds no balances."""
        return cls(tokens={normalize_address(t.address): t for t in tokens})

    def token(self, address: str) -> Token | None:
        return self.tokens.get(normalize_address(address))

    def fund(self, token: str, holder: str, amount: int) -> None:
        """Credits `amount` atomic units to `holder` (a faucet for tests)."""
        key = (normalize_address(token), normalize_address(holder))
        with self.lock:
            self.balances[key] = self.balances.get(key, 0) + amount

    def balance(self, token: str, holder: str) -> int:
        with self.lock:
            return self.balances.get((normalize_address(token), normalize_address(holder)), 0)

    def authorization_used(self, token: str, sender: str, nonce: bytes) -> bool:
        with self.lock:
            return (normalize_address(token), normalize_address(sender), nonce) in self.used_nonces

    def transfer_with_authorization(
        self,
        token_address: str,
        sender: str,
        to: str,
        value: int,
        valid_after: int,
        valid_before: int,
        nonce: bytes,
        signature: bytes,
        *,
        apply: bool,
    ) -> None:
        """Runs FiatToken's `transferWithAuthorization` checks; moves funds when `apply`."""
        token = self.token(token_address)
        if token is None:
            raise ContractRevert("no contract at this address")
        now = int(time.time())
        if now <= valid_after:
            raise ContractRevert("FiatTokenV2: authorization is not yet valid")
        if now >= valid_before:
            raise ContractRevert("FiatTokenV2: authorization is expired")
        domain = {
            "name": token.name,
            "version": token.version,
            "chainId": token.chain_id,
            "verifyingContract": token.address,
        }
        message = {
            "from": sender,
            "to": to,
            "value": value,
            "validAfter": valid_after,
            "validBefore": valid_before,
            "nonce": nonce,
        }
        signer = recover_typed_data_signer(
            domain,
            {"TransferWithAuthorization": TRANSFER_WITH_AUTHORIZATION_TYPES},
            "TransferWithAuthorization",
            message,
            signature,
        )
        if normalize_address(signer) != normalize_address(sender):
            raise ContractRevert("FiatTokenV2: invalid signature")
        key_from = (normalize_address(token.address), normalize_address(sender))
        key_to = (normalize_address(token.address), normalize_address(to))
        nonce_key = (key_from[0], key_from[1], nonce)
        with self.lock:
            if nonce_key in self.used_nonces:
                raise ContractRevert("FiatTokenV2: authorization is used or canceled")
            if self.balances.get(key_from, 0) < value:
                raise ContractRevert("ERC20: transfer amount exceeds balance")
            if not apply:
                return
            self.used_nonces.add(nonce_key)
            self.balances[key_from] -= value
            self.balances[key_to] = self.balances.get(key_to, 0) + value
            self.transfers.append(_Transfer(key_from[0], key_from[1], key_to[1], value))


def _vrs_signature(v: int, r: bytes, s: bytes) -> bytes:
    return bytes(r) + bytes(s) + bytes([v])


def _address_topic(address: str) -> str:
    return "0x" + "00" * 12 + normalize_address(address)[2:].lower()


class LedgerSigner:
    """`FacilitatorEvmSigner` over a `UsdcLedger`, with an `eth_account` key as identity."""

    def __init__(self, ledger: UsdcLedger, chain_id: int) -> None:
        self._ledger = ledger
        self._chain_id = chain_id
        self._account = Account.create()
        self._receipts: dict[str, TransactionReceipt] = {}
        self._lock = threading.Lock()
        self._block = 0

    def get_addresses(self) -> list[str]:
        return [self._account.address]

    def get_chain_id(self) -> int:
        return self._chain_id

    def get_code(self, address: str) -> bytes:
        # Token contracts have bytecode; every other address is an externally owned account.
        return b"\x60\x80\x60\x40" if self._ledger.token(address) is not None else b""

    def get_balance(self, address: str, token_address: str) -> int:
        return self._ledger.balance(token_address, address)

    def verify_typed_data(
        self,
        address: str,
        domain: TypedDataDomain | dict[str, Any],
        types: dict[str, list[TypedDataField]],
        primary_type: str,
        message: dict[str, Any],
        signature: bytes,
    ) -> bool:
        try:
            recovered = recover_typed_data_signer(
                _domain_dict(domain), _fields(types), primary_type, message, signature
            )
        except Exception:
            return False
        return normalize_address(recovered) == normalize_address(address)

    def read_contract(self, address: str, abi: list[dict[str, Any]], function_name: str, *args: Any) -> Any:
        token = self._ledger.token(address)
        if token is None:
            raise ContractRevert(f"no contract at {address}")
        if function_name == "transferWithAuthorization":
            self._transfer(address, args, apply=False)
            return None
        if function_name == "balanceOf":
            return self._ledger.balance(address, args[0])
        if function_name == "authorizationState":
            return self._ledger.authorization_used(address, args[0], bytes(args[1]))
        if function_name == "name":
            return token.name
        if function_name == "version":
            return token.version
        raise NotImplementedError(f"the in-memory ledger does not answer {function_name}")

    def write_contract(
        self,
        address: str,
        abi: list[dict[str, Any]],
        function_name: str,
        *args: Any,
        data_suffix: str | None = None,
    ) -> str:
        if function_name != "transferWithAuthorization":
            raise NotImplementedError(f"the in-memory ledger does not execute {function_name}")
        sender, to, value = args[0], args[1], int(args[2])
        self._transfer(address, args, apply=True)
        with self._lock:
            self._block += 1
            tx_hash = "0x" + hashlib.sha3_256(
                f"{address}:{sender}:{bytes(args[5]).hex()}:{self._block}".encode()
            ).hexdigest()
            log = {
                "address": normalize_address(address),
                "topics": [TRANSFER_TOPIC, _address_topic(sender), _address_topic(to)],
                "data": "0x" + value.to_bytes(32, "big").hex(),
            }
            self._receipts[tx_hash] = TransactionReceipt(
                status=1, block_number=self._block, tx_hash=tx_hash, logs=[log]
            )
        return tx_hash

    def send_transaction(self, to: str, data: bytes) -> str:
        raise NotImplementedError("the in-memory ledger deploys no contracts")

    def wait_for_transaction_receipt(self, tx_hash: str) -> TransactionReceipt:
        with self._lock:
            receipt = self._receipts.get(tx_hash)
        if receipt is None:
            raise LookupError(f"unknown transaction {tx_hash}")
        return receipt

    def _transfer(self, token: str, args: tuple[Any, ...], *, apply: bool) -> None:
        if len(args) == 9:
            signature = _vrs_signature(int(args[6]), args[7], args[8])
        elif len(args) == 7:
            signature = bytes(args[6])
        else:
            raise ContractRevert("wrong number of arguments to transferWithAuthorization")
        self._ledger.transfer_with_authorization(
            token,
            args[0],
            args[1],
            int(args[2]),
            int(args[3]),
            int(args[4]),
            bytes(args[5]),
            signature,
            apply=apply,
        )
