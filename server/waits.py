"""Waits that fit the client: a tool that blocks (wait_for_work, get_messages and get_review with wait_seconds) never
outlives the client's own request timeout, and tells a client that asked for progress that it is still waiting.

Claude Code and Claude Desktop end a tool call after about 60 s, whatever the tool was asked to wait: a wait they
cut is an error to the model, not an answer. So a call from them waits at most CLIENT_WAIT (their clientInfo names
are in CLIENT_LIMITS), and wait_for_work's default is below every such timeout. Longer waits stay available as MCP
tasks (server/task_ext.py) for clients that have them. While it waits, a call whose request carried a progressToken
gets a `notifications/progress` every PROGRESS_EVERY seconds (clients that reset their timeout on progress keep
waiting; the others see it is alive); without one, nothing is sent.
"""

from __future__ import annotations

import time

from mcp.server.mcpserver import Context

from hiveboard.board.events import Notifier

from . import lanes
from .identity import client_of

DEFAULT_WAIT = 45  # wait_for_work's default: under a 60 s client timeout with room for the answer
CLIENT_WAIT = 50.0  # the longest a call of a client with a ~60 s timeout blocks
CLIENT_LIMITS = {"claude-code": CLIENT_WAIT, "claude-ai": CLIENT_WAIT}  # clientInfo name (claude-ai: Claude Desktop)
PROGRESS_EVERY = 10.0  # seconds between two progress notifications of a waiting call


def client_name(ctx: Context | None) -> str | None:
    """The clientInfo name the connection's client gave, if it gave one."""
    try:
        return client_of(ctx.session)[0] if ctx is not None else None
    except (LookupError, ValueError, AttributeError):  # no request behind this context
        return None


def bounded(ctx: Context | None, seconds: float) -> float:
    """`seconds`, cut to what this call's client waits for a tool's answer; a call run as an MCP task (its request
    answered already with the task's handle) waits what it asked."""
    if lanes.detached.get():
        return seconds
    return min(seconds, CLIENT_LIMITS.get(client_name(ctx) or "", seconds))


async def wait(ctx: Context | None, notifier: Notifier, marks: dict[str, int], timeout: float) -> bool:
    """notifier.wait_any(marks, timeout), reporting progress every PROGRESS_EVERY seconds to a client that asked for
    it (the SDK sends nothing for a request without a progressToken). Whether an event came."""
    end = time.monotonic() + timeout
    started = time.monotonic()
    while True:
        left = end - time.monotonic()
        if await notifier.wait_any(marks, min(left, PROGRESS_EVERY)):
            return True
        if left <= PROGRESS_EVERY:
            return False
        if ctx is not None:
            waited = time.monotonic() - started
            await ctx.report_progress(round(waited), round(timeout), f"waiting: {round(waited)} of {round(timeout)} s")
