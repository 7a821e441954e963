"""The board inside the client (MCP Apps, server/board_app.py): what a host reads from the server, the view's
live data, and the App messages the view relies on, kept in app_wire.json (tests/server/test_board_app_browser.py
checks the same messages as they pass through the ext-apps SDK's own host bridge in Chromium).

To accept a deliberate change of app_wire.json: HIVEBOARD_UPDATE_SNAPSHOT=1 pytest tests/server/test_board_app.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio
import pytest
from conftest import call
from mcp.client import advertise

from hiveboard.server.board_app import BOARD_URI, BoardFrame, view_html

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

WIRE = Path(__file__).with_name("app_wire.json")
UPDATE = "HIVEBOARD_UPDATE_SNAPSHOT=1 pytest tests/server/test_board_app.py"
APPS = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
UI_TOOLS = ("get_board", "get_task", "board_view")
ABOUT = (
    "The MCP App wire hiveboard's board view relies on: what a host reads from the server, the messages the view "
    "sends (method -> its params' keys) and handles. Checked by tests/server/test_board_app.py and, through the "
    "ext-apps SDK's AppBridge in Chromium, by test_board_app_browser.py. Do not edit by hand: " + UPDATE
)


def view_messages(html: str) -> dict:
    """The messages the view's script sends (method -> its params' keys, as written) and the ones it handles."""
    script = html.split("<script>", 1)[1]
    sends = {}
    for method, params in re.findall(r'(?:request|notify)\("([\w/-]+)", (\{[^;]*?\})\)', script, re.S):
        sends[method] = top_level_keys(params)
    handles = sorted(set(re.findall(r'm\.method === "([\w/-]+)"', script)))
    return {"view_sends": dict(sorted(sends.items())), "view_handles": handles}


def top_level_keys(literal: str) -> list[str]:
    """The keys of a JavaScript object literal's outermost level, as the script writes them."""
    keys, depth = [], 0
    for token in re.finditer(r"[{}\[\]]|(\w+):", literal):
        if token.group(0) in "{[":
            depth += 1
        elif token.group(0) in "}]":
            depth -= 1
        elif depth == 1:
            keys.append(token.group(1))
    return sorted(set(keys))


async def server_side(connect) -> dict:
    """What an MCP Apps host reads from the server: the tools naming the view, and the view's resource."""
    async with connect("viewer", extensions=[APPS]) as host:
        tools = {t.name: t for t in (await host.list_tools()).tools}
        read = (await host.read_resource(BOARD_URI)).contents[0]
    return {
        "tools": {
            name: tools[name].model_dump(
                mode="json", by_alias=True, exclude_none=True, include={"meta", "input_schema"}
            )
            for name in UI_TOOLS
        },
        "resource": read.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"text"}),
        "board_view_result": BoardFrame.model_json_schema(),
    }


async def test_the_app_wire_matches_the_checked_in_snapshot(connect):
    found = {"about": ABOUT, "server": await server_side(connect), **view_messages(view_html())}
    text = json.dumps(found, indent=2, sort_keys=True) + "\n"
    if os.environ.get("HIVEBOARD_UPDATE_SNAPSHOT"):
        WIRE.write_text(text, encoding="utf-8")
        return
    assert WIRE.exists(), f"{WIRE} is missing; create it with {UPDATE}"
    assert json.loads(WIRE.read_text(encoding="utf-8")) == found, f"the App wire changed; if deliberate: {UPDATE}"


async def test_the_view_is_offered_only_to_hosts_that_declared_mcp_apps(connect):
    async with connect("viewer") as plain:
        tools = {t.name: t for t in (await plain.list_tools()).tools}
        await call(plain, "create_task", title="Write the parser")
        as_text = await call(plain, "get_board")
    assert "board_view" not in tools and tools["get_board"].meta is None  # its model sees the tools as always
    async with connect("viewer", extensions=[APPS]) as host:
        tools = {t.name: t for t in (await host.list_tools()).tools}
        assert await call(host, "get_board") == as_text  # the text result is kept: the view is beside it
    assert tools["get_board"].meta == {"ui": {"resourceUri": BOARD_URI}}
    assert tools["get_task"].meta == {"ui": {"resourceUri": BOARD_URI}}
    assert tools["board_view"].meta["ui"]["visibility"] == ["app"]  # hosts keep it from the model


async def test_the_view_is_one_self_contained_document(connect):
    async with connect("viewer", extensions=[APPS]) as host:
        read = (await host.read_resource(BOARD_URI)).contents[0]
    assert read.mime_type == "text/html;profile=mcp-app"
    html = read.text
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing fetched from anywhere
    assert "innerHTML" not in html  # card titles are text, never markup


async def test_the_view_follows_a_claim_live(connect):
    async with connect("alice") as alice, connect("viewer", extensions=[APPS]) as host:
        card = await call(alice, "create_task", title="Write the parser")
        first = await call(host, "board_view")
        todo = next(c for c in first["columns"] if c["status"] == "todo")
        assert [c["id"] for c in todo["cards"]] == [card["id"]]
        got = {}

        async def follow():
            got["frame"] = await call(host, "board_view", after=first["event"], wait_seconds=25)

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()  # the view's call is waiting on the board's notifier
            assert "frame" not in got
            await call(alice, "claim_task", task_id=card["id"])
        moved = next(c for c in got["frame"]["columns"] if c["status"] == "in_progress")
        assert [(c["id"], c["assignee"]) for c in moved["cards"]] == [(card["id"], "alice")]
        assert got["frame"]["event"] > first["event"]
        unchanged = await call(host, "board_view", after=got["frame"]["event"], wait_seconds=0)
        assert unchanged["event"] == got["frame"]["event"]  # nothing moved: the same frame, at once
