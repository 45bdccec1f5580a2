"""A minimal MCP client over Streamable HTTP (JSON-RPC 2.0 POSTs to `/mcp`)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx

PROTOCOL_VERSION = "2025-06-18"


class McpError(Exception):
    """A JSON-RPC error or an answer that is not JSON-RPC."""


class McpSession:
    """`initialize`, then `tools/call`; keeps `Mcp-Session-Id` when the server issues one."""

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._http = httpx.Client(timeout=15)
        self._ids = itertools.count(1)
        self._session: str | None = None

    def __enter__(self) -> "McpSession":
        result = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "x402-interop-checks", "version": "1"},
            },
        )
        if "serverInfo" not in result:
            raise McpError(f"initialize answered without serverInfo: {result}")
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = next(self._ids)
        message = self._post({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        if message is None or message.get("id") != ident:
            raise McpError(f"{method}: no JSON-RPC answer with id {ident}: {message}")
        if "error" in message:
            raise McpError(f"{method}: {message['error']}")
        return message["result"]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The tool's structured result (or its text content parsed as JSON)."""
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise McpError(f"{name} reported an error: {result}")
        if isinstance(result.get("structuredContent"), dict):
            return result["structuredContent"]
        texts = [c["text"] for c in result.get("content", []) if c.get("type") == "text"]
        if not texts:
            raise McpError(f"{name} returned no content: {result}")
        return json.loads(texts[0])

    def _post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self._session:
            headers["Mcp-Session-Id"] = self._session
        response = self._http.post(self._endpoint, json=message, headers=headers)
        if response.status_code == 202:
            return None
        if response.status_code != 200:
            raise McpError(f"HTTP {response.status_code}: {response.text[:300]}")
        self._session = response.headers.get("Mcp-Session-Id", self._session)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            for line in response.text.splitlines():
                if line.startswith("data:"):
                    return json.loads(line[5:])
            return None
        return response.json()
