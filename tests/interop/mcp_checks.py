"""Checks of paid MCP tools: the official x402 MCP client (`x402.mcp`), over the official MCP
Python SDK's streamable HTTP client, pays the tools of the crate's `paid_mcp` example, whose
payments the sandbox facilitator (its own HTTP process) verifies and settles.

`X402_PAID_MCP` is the example's base URL (its MCP endpoint is `/mcp`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from eth_account import Account
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from x402 import x402Client
from x402.mcp.client import x402MCPSession
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.upto import UptoEvmClientScheme
from x402.schemas import SettleResponse

from suite import Suite, expect

BASE = "eip155:8453"


def _text(result: Any) -> str:
    content = result.content or []
    return getattr(content[0], "text", "") if content else ""


def _settlement(result: Any) -> SettleResponse:
    response = result.payment_response
    if isinstance(response, dict):
        response = SettleResponse.model_validate(response)
    expect(isinstance(response, SettleResponse),
           f"no x402/payment-response in the paid result: {result.raw_result}")
    return response


async def _session_call(url: str, client: x402Client, tool: str, arguments: dict[str, Any]):
    async with streamablehttp_client(f"{url}/mcp") as (read, write, _):
        async with ClientSession(read, write) as session:
            paid = x402MCPSession(session, client, auto_payment=True)
            await paid.initialize()
            listed = await paid.list_tools()
            names = sorted(tool.name for tool in listed.tools)
            expect(names == ["echo", "quote", "summarize"], f"tools/list: {names}")
            unpaid = await session.call_tool(tool, arguments)
            expect(unpaid.isError, f"{tool} without payment was not refused: {unpaid}")
            required = unpaid.structuredContent or {}
            expect(json.loads(unpaid.content[0].text) == required,
                   f"{tool}: structuredContent and content[0].text differ")
            return required, await paid.call_tool(tool, arguments)


def register(suite: Suite) -> None:
    url = os.environ["X402_PAID_MCP"]

    @suite.check("mcp_official_client_pays_the_exact_tool")
    async def _exact() -> None:
        account = Account.create()
        client = x402Client()
        register_exact_evm_client(client, account)
        required, result = await _session_call(url, client, "quote", {"symbol": "ACME"})
        accept = required["accepts"][0]
        expect((accept["scheme"], accept["network"], accept["amount"]) == ("exact", BASE, "50000"),
               f"quote's accept: {accept}")
        expect(required["resource"]["url"] == "mcp://tool/quote", f"resource: {required['resource']}")
        bazaar = required["extensions"]["bazaar"]["info"]["input"]
        expect((bazaar["type"], bazaar["toolName"]) == ("mcp", "quote"), f"bazaar input: {bazaar}")
        expect(result.payment_made and not result.is_error, f"paid quote: {result.raw_result}")
        expect(_text(result).startswith("ACME: "), f"quote's text: {_text(result)!r}")
        settled = _settlement(result)
        expect(settled.success and settled.network == BASE and len(settled.transaction) == 66,
               f"settlement: {settled}")
        expect((settled.payer or "").lower() == account.address.lower(), f"payer: {settled.payer}")

    @suite.check("mcp_official_client_pays_the_upto_tool_what_it_metered")
    async def _upto() -> None:
        account = Account.create()
        client = x402Client()
        client.register(BASE, UptoEvmClientScheme(account))
        text = "An agent pays for tools over MCP. " * 8  # 272 characters: 3 started hundreds
        required, result = await _session_call(url, client, "summarize", {"text": text})
        accept = required["accepts"][0]
        expect((accept["scheme"], accept["network"], accept["amount"]) == ("upto", BASE, "200000"),
               f"summarize's accept: {accept}")
        expect(result.payment_made and not result.is_error, f"paid summarize: {result.raw_result}")
        expect("272 characters" in _text(result), f"summary: {_text(result)!r}")
        settled = _settlement(result)
        expect(settled.success and len(settled.transaction) == 66, f"settlement: {settled}")
        expect(str(settled.amount) == "30000", f"charged {settled.amount}, expected 30000 (0.03 USDC)")
        expect((settled.payer or "").lower() == account.address.lower(), f"payer: {settled.payer}")
