"""The MCP SDK's private surface that server/compat.py relies on. When an SDK upgrade moves any of it,
these fail by name (and pyproject pins the minor version they cover)."""

from __future__ import annotations

import weakref
from typing import Annotated

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import EmptyResult, SubscribeRequestParams
from pydantic import Field, ValidationError

from hiveboard.server.compat import (
    add_request_handler,
    connection_of,
    rejected_arguments,
)
from hiveboard.server.identity import client_of

pytestmark = pytest.mark.anyio


async def test_an_added_request_handler_answers_its_method():
    seen = []
    server = MCPServer("compat")

    @server.resource("test://thing")
    def thing() -> str:
        return "x"

    async def subscribe(rctx, params: SubscribeRequestParams) -> EmptyResult:
        seen.append((params.uri, rctx.session is not None))
        return EmptyResult()

    add_request_handler(server, "resources/subscribe", SubscribeRequestParams, subscribe)
    async with Client(server, mode="legacy") as client:
        await client.subscribe_resource("test://thing")
    assert seen == [("test://thing", True)]


async def test_a_connection_outlives_requests_and_differs_between_clients():
    server = MCPServer("compat")
    seen: list = []

    @server.tool()
    def where(ctx: Context) -> str:
        seen.append(connection_of(ctx.session))
        return "ok"

    async with Client(server, mode="legacy") as first:
        await first.call_tool("where", {})
        await first.call_tool("where", {})
        async with Client(server, mode="legacy") as second:
            await second.call_tool("where", {})
    assert seen[0] is not None and seen[0] is seen[1] and seen[2] is not seen[0]
    weakref.ref(seen[0])  # identity keeps sessions in a WeakKeyDictionary
    hash(seen[0])


async def test_a_connection_names_its_client_and_takes_a_notification_of_ours_outside_any_request():
    """What the channel (server/channel.py) needs of the SDK: the clientInfo name on the session, and a
    notification whose method is not the SDK's, sent on the connection after the request that found it ended."""
    from mcp_types import Implementation

    server = MCPServer("compat")
    found: list = []
    clients: list = []

    @server.tool()
    def where(ctx: Context) -> str:
        found.append(connection_of(ctx.session))
        clients.append(client_of(ctx.session))
        return "ok"

    heard: list = []

    async def message_handler(message) -> None:
        heard.append(message)

    claude = Implementation(name="claude-code", version="2.1.154")
    async with Client(server, mode="legacy", client_info=claude, message_handler=message_handler) as client:
        await client.call_tool("where", {})
        assert clients == [("claude-code", {})]
        await found[0].notify("notifications/message", {"level": "info", "data": "after the request"})
        await client.call_tool("where", {})  # the notification was read before this answer
    assert [m.params.data for m in heard if getattr(m, "method", None) == "notifications/message"] == [
        "after the request"
    ]


async def test_a_rejected_argument_is_told_apart_from_a_failing_tool():
    server = MCPServer("compat")

    @server.tool()
    def double(n: int) -> int:
        if n < 0:
            raise ToolError("negative")
        return 2 * n

    with pytest.raises(ToolError) as rejected:
        await server.call_tool("double", {"n": "not a number"})
    assert isinstance(rejected_arguments(rejected.value), ValidationError)
    with pytest.raises(ToolError) as failed:
        await server.call_tool("double", {"n": -1})
    assert rejected_arguments(failed.value) is None


async def test_a_declared_mcp_param_header_is_checked_and_an_undeclared_one_is_not():
    server = MCPServer("compat")

    @server.tool()
    def routed(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return region

    @server.tool()
    def plain(region: str) -> str:
        return region

    async def forge(request):  # a header that disagrees with the body, on both tools
        request.headers["mcp-param-region"] = "elsewhere"

    app = server.streamable_http_app()
    async with app.router.lifespan_context(app):
        http = httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000", event_hooks={"request": [forge]}
        )
        async with Client(streamable_http_client("http://127.0.0.1:8000/mcp", http_client=http)) as client:
            assert (await client.call_tool("plain", {"region": "eu"})).content[0].text == "eu"
            with pytest.raises(Exception, match="Mcp-Param-Region header does not match"):
                await client.call_tool("routed", {"region": "eu"})


async def test_a_wait_is_cut_to_what_its_client_waits_for_an_answer():
    """server/waits.py reads the clientInfo name on the request's session: Claude Code's calls are cut under
    its tool timeout, another client's are not, and a context without a request names no client."""
    from mcp_types import Implementation

    from hiveboard.server.waits import CLIENT_WAIT, bounded, client_name

    server = MCPServer("compat")
    seen: list = []

    @server.tool()
    def wait(ctx: Context) -> str:
        seen.append((client_name(ctx), bounded(ctx, 3600.0)))
        return "ok"

    for name in ("claude-code", "some-client"):
        async with Client(server, mode="legacy", client_info=Implementation(name=name, version="1")) as client:
            await client.call_tool("wait", {})
    assert seen == [("claude-code", CLIENT_WAIT), ("some-client", 3600.0)]
    assert client_name(None) is None and bounded(None, 3600.0) == 3600.0
