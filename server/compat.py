"""Every use of the MCP SDK's private surface, in one place: what the SDK (pinned in pyproject.toml to the minor
version tests/server/test_compat.py covers) offers no public way to do. Each item names the public API it lacks and
what would replace it; when an upgrade moves any of them, the compat tests fail by name instead of identity or
subscriptions breaking quietly. tests/test_public_apis.py refuses a library's private name anywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError


def add_request_handler(server: MCPServer, method: str, params_type: type, handler: Callable[..., Awaitable]) -> None:
    """Answer `method` with `handler(request_context, params)` (replacing the SDK's own handler).
    Missing: MCPServer.add_request_handler (Extension.methods cannot replace a handler and advertises an extension)."""
    server._lowlevel_server.add_request_handler(method, params_type, handler)


def connection_of(session) -> object | None:
    """The connection behind a request's session: `ctx.session` is rebuilt for every request, the
    connection lives as long as the MCP session (weak-referenceable, usable as a dictionary key).
    Missing: a public `connection` on ServerSession (or on the ServerRequestContext handlers get)."""
    return getattr(session, "_connection", None)


def rejected_arguments(error: ToolError) -> ValidationError | None:
    """The validation error when the SDK refused a tool's arguments (it chains it as the cause).
    Missing: a ToolError subclass (or field) for refused arguments; the chaining is undocumented behaviour."""
    return error.__cause__ if isinstance(error.__cause__, ValidationError) else None


class _AnsweringReader:
    """The stdio transport's read stream, minus lines that are not a JSON-RPC message: the SDK hands
    those to the server as exceptions and nobody answers, so a client waits forever. Each gets a
    JSON-RPC error instead: -32700 for text that is not JSON, -32602 for JSON whose strings are not
    valid Unicode (a lone UTF-16 surrogate escape), with the request's id when it can be read.
    Missing: an answer of the SDK's own to an unreadable line (its dispatcher drops the exception)."""

    def __init__(self, inner, write_stream):
        self._inner, self._write = inner, write_stream

    def __getattr__(self, name):  # last_context and anything else the dispatcher looks up
        return getattr(self._inner, name)

    async def receive(self):
        while True:
            item = await self._inner.receive()
            if not isinstance(item, ValidationError):
                return item
            await self._write.send(SessionMessage(_unreadable_line_answer(item)))

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _unreadable_line_answer(error: ValidationError) -> JSONRPCError:
    line = next((e.get("input") for e in error.errors() if isinstance(e.get("input"), str)), "")
    try:
        request = json.loads(line)  # Python's parser keeps lone surrogates, so the id can still be read
    except ValueError:
        return JSONRPCError(
            jsonrpc="2.0",
            id=None,
            error=ErrorData(code=PARSE_ERROR, message="the line is not valid JSON; send one JSON-RPC message per line"),
        )
    request_id = request.get("id") if isinstance(request, dict) else None
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        request_id = None
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(
            code=INVALID_PARAMS,
            message="the request contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not "
            "valid Unicode; nothing was done. Send valid UTF-8 text",
        ),
    )


async def run_stdio(server: MCPServer, experimental: dict[str, dict] | None = None) -> None:
    """MCPServer.run_stdio_async, answering lines that are not a JSON-RPC message instead of dropping them, and
    declaring the `experimental` capabilities (a Claude Code channel's `claude/channel`) in its initialize answer.
    Missing: MCPServer's lowlevel Server, or run_stdio_async(read_stream=..., experimental_capabilities=...)."""
    lowlevel = server._lowlevel_server
    options = lowlevel.create_initialization_options(experimental_capabilities=experimental)
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(_AnsweringReader(read_stream, write_stream), write_stream, options)


def arguments_valid(server: MCPServer, name: str, arguments: dict) -> bool:
    """Whether a call's arguments pass its tool's own validation (what the call would refuse first), checked
    without calling it; False for an unknown tool.
    Missing: MCPServer.get_tool(name) (its ToolManager is private); Tool.fn_metadata is public."""
    tool = server._tool_manager.get_tool(name)
    if tool is None:
        return False
    try:
        tool.fn_metadata.validate_arguments(arguments)
    except (ValidationError, ValueError):
        return False
    return True
