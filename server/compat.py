"""Every use of the MCP SDK's private surface, in one place.

The SDK (pinned in pyproject.toml to the minor version tests/server/test_compat.py covers) has no
public way to add a request handler to an MCPServer, to tell a connection apart from the per-request
session object, or to tell a rejected argument from a failing tool. When an upgrade moves any of
these, the compat tests fail by name instead of identity or subscriptions breaking quietly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError


def add_request_handler(server: MCPServer, method: str, params_type: type, handler: Callable[..., Awaitable]) -> None:
    """Answer `method` with `handler(request_context, params)` (replacing the SDK's own handler)."""
    server._lowlevel_server.add_request_handler(method, params_type, handler)


def connection_of(session) -> object | None:
    """The connection behind a request's session: `ctx.session` is rebuilt for every request, the
    connection lives as long as the MCP session (weak-referenceable, usable as a dictionary key)."""
    return getattr(session, "_connection", None)


def rejected_arguments(error: ToolError) -> ValidationError | None:
    """The validation error when the SDK refused a tool's arguments (it chains it as the cause)."""
    return error.__cause__ if isinstance(error.__cause__, ValidationError) else None
