"""tools/list as a client receives it, kept in tools_list.json: a renamed argument, a reworded description
or a dropped hint is then a reviewed decision, not an accident.

The snapshot is of the server `hiveboard serve` builds (memory on, never opened by listing), through a
real MCP client. Each entry is the tool as the "full" profile sends it; the default "lean" profile sends
the same without outputSchema, which the test checks too. Nothing in it depends on the machine or the run:
the server's descriptions are plain text (whitespace already collapsed by StrictServer.list_tools), and
no path, id or time goes into a tool.

To accept a change: HIVEBOARD_UPDATE_SNAPSHOT=1 pytest tests/server/test_wire_snapshot.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest
from mcp import Client

from hiveboard.memory.lazy import LazyMemory
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity

pytestmark = pytest.mark.anyio

SNAPSHOT = Path(__file__).with_name("tools_list.json")
UPDATE = "HIVEBOARD_UPDATE_SNAPSHOT=1 pytest tests/server/test_wire_snapshot.py"
FIELDS = ("description", "inputSchema", "outputSchema", "annotations", "title", "_meta")
ABOUT = (
    "tools/list of hiveboard serve, as tests/server/test_wire_snapshot.py checks it; outputSchema is sent "
    "only with HIVEBOARD_TOOL_PROFILE=full. Do not edit by hand: " + UPDATE
)


def _never_opened():
    raise AssertionError("listing the tools opened the memory")


async def listed(board, profile: str) -> dict[str, dict]:
    """name -> the tool's advertised fields, in their wire form (camelCase, absent when unset)."""
    server = build_server(board, Identity(board.agents, "memory"), memory=LazyMemory(_never_opened), profile=profile)
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
    wire = {}
    for tool in tools:
        sent = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        wire[tool.name] = {field: sent[field] for field in FIELDS if field in sent}
    return wire


def render(tools: dict[str, dict]) -> str:
    return json.dumps({"about": ABOUT, "tools": tools}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def changes(old: dict[str, dict], new: dict[str, dict]) -> list[str]:
    """One line per tool that differs: added, removed, or which of its fields changed."""
    lines = [f"  {name}: new tool" for name in sorted(new.keys() - old.keys())]
    lines += [f"  {name}: removed" for name in sorted(old.keys() - new.keys())]
    for name in sorted(old.keys() & new.keys()):
        changed = [field for field in FIELDS if old[name].get(field) != new[name].get(field)]
        if changed:
            lines.append(f"  {name}: {', '.join(changed)} changed")
    return lines


async def test_tools_list_matches_the_checked_in_snapshot(board):
    full = await listed(board, "full")
    lean = await listed(board, "lean")
    assert lean == {name: {k: v for k, v in tool.items() if k != "outputSchema"} for name, tool in full.items()}, (
        "the lean profile should advertise what the full one does, without output schemas"
    )

    text = render(full)
    if os.environ.get("HIVEBOARD_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text(text, encoding="utf-8")
        return
    if not SNAPSHOT.exists():
        pytest.fail(f"{SNAPSHOT} is missing; create it with {UPDATE}")
    kept = SNAPSHOT.read_text(encoding="utf-8")
    if kept == text:
        return
    old = json.loads(kept).get("tools", {})
    diff = difflib.unified_diff(kept.splitlines(), text.splitlines(), "tools_list.json", "tools/list now", lineterm="")
    shown = list(diff)
    more = f"\n... {len(shown) - 200} more diff lines" if len(shown) > 200 else ""
    pytest.fail(
        "tools/list differs from the checked-in snapshot tests/server/tools_list.json:\n"
        + "\n".join(changes(old, full) or ["  (formatting only)"])
        + f"\nIf the change is deliberate, accept it with:\n  {UPDATE}\nand commit the file with the change.\n\n"
        + "\n".join(shown[:200])
        + more,
        pytrace=False,
    )
