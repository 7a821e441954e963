"""The board inside the client: an MCP App (the `io.modelcontextprotocol/ui` extension, SEP-1865).

`get_board` and `get_task` name the `ui://hiveboard/board` resource in their `_meta.ui.resourceUri`; a host
with MCP Apps renders it in a sandboxed iframe beside the tool's result, and a client without apps shows the
result's text as always. The view (board_app.html) is one self-contained page: no script, style or font is
fetched, so it runs offline and under the strictest CSP a host applies (the spec's default, `connect-src
'none'`). Its app side is a few dozen lines speaking the protocol itself (ui/initialize, tools/call through the
host, size-changed) rather than the ext-apps SDK's large app bundle (read on every resources/read); the
tests check it against the SDK's own host side (AppBridge) in Chromium.

It stays live by calling `board_view`, a tool for the app only (`visibility: ["app"]`, which hosts keep from the
model): the columns and the newest board event id, and with `after=` that id it waits on the board's notifier
until a card changes (up to `WAIT_MOST` seconds, under every client's request timeout), then answers again.
The spec has no server-to-view notification; a waiting call is the push it allows.
"""

from __future__ import annotations

import time
from importlib.resources import files
from typing import Annotated

from mcp.server.apps import APP_MIME_TYPE, Apps, client_supports_apps
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from hiveboard.board.events import Topic
from hiveboard.board.models import STATUSES
from hiveboard.board.views import COLUMN_LIMIT

from . import lanes
from .boundary import READ, tool_boundary
from .deps import Deps

BOARD_URI = "ui://hiveboard/board"
UI = {"ui": {"resourceUri": BOARD_URI}}  # the _meta of a tool whose result the board view renders
WAIT_MOST = 25.0  # seconds one board_view call waits for a change (clients end calls at about 60)

__all__ = ["BOARD_URI", "UI", "APP_MIME_TYPE", "apps_extension", "register", "view_html"]


class AppCard(BaseModel):
    """A card as the board view draws it."""

    id: int
    title: str
    priority: str
    task_type: str
    assignee: str | None = None
    reason: str | None = Field(None, description="why it is blocked or waits on a person")


class AppColumn(BaseModel):
    status: str
    count: int
    cards: list[AppCard]


class BoardFrame(BaseModel):
    """What the board view shows: every column (up to COLUMN_LIMIT cards each) as of board event `event`."""

    event: int = Field(description="the newest board event included: pass it back as after")
    columns: list[AppColumn]


def view_html() -> str:
    """The view's one HTML document (board_app.html beside this module)."""
    return files("hiveboard.server").joinpath("board_app.html").read_text(encoding="utf-8")


def apps_extension() -> Apps:
    """The MCP Apps extension with the board view's resource (and the extension advertised in the server's
    capabilities, as SEP-2133 asks)."""
    apps = Apps()
    apps.add_html_resource(
        BOARD_URI,
        view_html(),
        name="board-view",
        title="hiveboard",
        description="The board's columns and cards, live (an MCP App view for get_board and get_task)",
        prefers_border=False,
    )
    return apps


async def apps_where_declared(ctx, call_next):
    """Server middleware: tools/list shows the view's `_meta.ui` and the app-only tool only to a client that
    declared MCP Apps (the spec asks servers to check); any other client (Claude Code, Cursor's agent) lists the
    tools as before, and its model is not shown a tool meant for a view. The list arrives in its wire form."""
    result = await call_next(ctx)
    if ctx.method != "tools/list" or not isinstance(result, dict) or client_supports_apps(ctx):
        return result
    kept = []
    for tool in result.get("tools", []):
        ui = (tool.get("_meta") or {}).get("ui")
        if ui is None:
            kept.append(tool)
        elif "model" in ui.get("visibility", ("model",)):
            rest = {k: v for k, v in tool["_meta"].items() if k != "ui"}
            kept.append({k: v for k, v in tool.items() if k != "_meta"} | ({"_meta": rest} if rest else {}))
    return {**result, "tools": kept}


def register(mcp: MCPServer, deps: Deps) -> None:
    board = deps.board
    mcp.middleware.append(apps_where_declared)
    notifier = board.store.notifier

    def frame() -> tuple[int, BoardFrame]:
        mark = notifier.mark(Topic.BOARD)  # before the reads: a change between them still wakes the wait
        event = board.views.last_event()
        columns = []
        for status in STATUSES:
            page = board.views.column(status, limit=COLUMN_LIMIT)
            cards = [
                AppCard(
                    id=c.id,
                    title=c.title,
                    priority=c.priority,
                    task_type=c.task_type,
                    assignee=c.assignee or c.reserved_for,
                    reason=(c.blocked_reason or "")[:200] or None,
                )
                for c in page.cards
            ]
            columns.append(AppColumn(status=status, count=page.count, cards=cards))
        return mark, BoardFrame(event=event, columns=columns)

    @mcp.tool(annotations=READ, meta={"ui": {"resourceUri": BOARD_URI, "visibility": ["app"]}})
    @tool_boundary
    async def board_view(
        after: Annotated[int | None, Field(ge=0)] = None,
        wait_seconds: Annotated[float, Field(ge=0, le=WAIT_MOST)] = 0,
    ) -> BoardFrame:
        """The board view's data (for the app); after= waits for a change."""
        deadline = time.monotonic() + wait_seconds
        while True:
            mark, found = await lanes.run("read", frame)
            remaining = deadline - time.monotonic()
            if after is None or found.event != after or remaining <= 0:
                return found
            async with lanes.stepped_aside():
                await notifier.wait_any({Topic.BOARD: mark}, remaining)
