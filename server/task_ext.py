"""The MCP Tasks extension (io.modelcontextprotocol/tasks, 2026-07-28): long waits as durable tasks.

For a client that declares the extension in its request's capabilities (2026-07-28 and later), a call of
`wait_for_work`, or of `get_messages` / `get_review` with `wait_seconds`, answers at once with a task handle
(`resultType: "task"`); the call runs on in the background and its result (the CallToolResult it would have
answered with) is stored when it ends. The client polls `tasks/get` (any node answers: the handle lives in the
board's store, board/mcp_tasks.py), may cancel with `tasks/cancel`, and `tasks/update` is acknowledged (no
hiveboard task asks for input). A client that does not declare the extension, and every older protocol, keeps
the blocking call. A task is its agent's only: another agent's handle reads as unknown.

The SDK (mcp 2.3) has the extension seam (mcp.server.extension) but no Tasks implementation: this is it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, RequestParams
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import Field

from hiveboard.board.db import iso
from hiveboard.board.errors import OverQuota
from hiveboard.board.tasks import Board

from . import lanes
from .boundary import StrictServer
from .identity import Identity, caller_key

IDENTIFIER = "io.modelcontextprotocol/tasks"
TTL = 7200.0  # seconds a task is kept from its creation: the longest wait (an hour), then an hour to fetch it
LEASE = 30.0  # the running node renews it every RENEW seconds; past it the task is failed (its node stopped)
RENEW = 10.0
RENEWALS = ("mcp-task-renewals",)  # the lanes' caller the renewals of this process's tasks wait in line as
POLL_MS = 1000  # what a client is asked to poll at

log = logging.getLogger(__name__)


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId", min_length=1, max_length=100)


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


def waits(name: str, arguments: dict) -> bool:
    """Whether a call is one of the long waits that become tasks."""
    if name == "wait_for_work":
        return True
    wait = arguments.get("wait_seconds")
    return name in ("get_messages", "get_review") and isinstance(wait, int | float) and wait > 0


class TasksExtension(Extension):
    identifier = IDENTIFIER

    def __init__(self, board: Board, identity: Identity, eligible: Callable[[str, dict], bool] = waits):
        self.board = board
        self.identity = identity
        self.eligible = eligible
        self.server: StrictServer | None = None  # set by build_server once the server exists
        self._running: dict[str, asyncio.Task] = {}
        self._renewer: asyncio.Task | None = None  # renews the leases of every task in `_running` (`_renew`)

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateTaskParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        ]

    # ----------------------------------------------------------------- tools/call

    async def intercept_tool_call(self, params, ctx, call_next):
        arguments = params.arguments or {}
        if not self.eligible(params.name, arguments) or not _declared(ctx):
            return await call_next(ctx)
        if self.server is None or await self.server.would_refuse(params.name, arguments):
            return await call_next(ctx)  # refused in one sentence as always, and no task is written
        agent = await self._agent(ctx)
        if agent is None:  # the tool itself says how to get an identity
            return await call_next(ctx)
        lanes.caller.set(caller_key(Context(request_context=ctx, mcp_server=self.server)))
        lanes.embedded.set(self.server.embedded)
        try:  # a write in the agent's turn of the write lane, as its tool calls' are
            task = await lanes.run("write", self.board.mcp_tasks.create, agent, params.name, TTL, LEASE)
        except OverQuota as exc:  # the agent's cap on running tasks: the call's answer says what to do
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        # the call runs on past this request (its own asyncio task, outside the request's cancel scope)
        loop = asyncio.get_running_loop()
        runner = loop.create_task(self._run(task["id"], ctx, call_next))
        self._running[task["id"]] = runner
        runner.add_done_callback(lambda _: self._running.pop(task["id"], None))
        if self._renewer is None or self._renewer.done():
            self._renewer = loop.create_task(self._renew())
        return _wire(task, "task")

    async def _run(self, task_id: str, ctx, call_next) -> None:
        lanes.detached.set(True)  # this task's own context: its request has ended, and with it its turn
        store = self.board.mcp_tasks
        outcome: tuple[str, dict | None, dict | None, str | None]
        try:
            result = await call_next(ctx)
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            outcome = ("completed", dumped, None, None)
        except asyncio.CancelledError:
            raise  # tasks/cancel (already recorded), or the server stopping (the lease lapses)
        except MCPError as exc:
            outcome = ("failed", None, exc.error.model_dump(mode="json", exclude_none=True), exc.error.message)
        except Exception as exc:  # a bug of ours: the task says so rather than working forever
            log.exception("task %s (%s) failed", task_id, type(exc).__name__)
            error = {"code": INTERNAL_ERROR, "message": "the call failed inside the server (see its log)"}
            outcome = ("failed", None, error, error["message"])
        status, result_, error_, message = outcome
        with anyio.CancelScope(shield=True):
            await lanes.run("write", store.finish, task_id, status, result_, error_, message)

    async def _renew(self) -> None:
        """Keep the leases of the tasks this process runs while any runs, all in one write per RENEW seconds, taken
        in the write lane's turns like any caller's (a write per task outside the lanes grew with the tasks one
        agent started); stop the calls of those cancelled meanwhile (on any node)."""
        lanes.caller.set(RENEWALS)
        lanes.embedded.set(self.server.embedded if self.server else False)
        while self._running:
            await anyio.sleep(RENEW)
            running = dict(self._running)
            if not running:
                return
            try:
                kept = await lanes.run("write", self.board.mcp_tasks.renew, list(running), LEASE)
            except Exception:  # the board unreachable for a moment: the leases last LEASE, the next period tries again
                log.exception("the leases of %d MCP tasks could not be renewed", len(running))
                continue
            for task_id, runner in running.items():
                if task_id not in kept:
                    runner.cancel()

    # ----------------------------------------------------------------- tasks/*

    async def _get(self, ctx, params: TaskParams) -> dict:
        return _wire(await self._own(ctx, params.task_id), "complete")

    async def _update(self, ctx, params: UpdateTaskParams) -> dict:
        await self._own(ctx, params.task_id)  # no hiveboard task asks for input: responses are ignored
        return {"resultType": "complete"}

    async def _cancel(self, ctx, params: TaskParams) -> dict:
        require_client_extension(ctx, IDENTIFIER)
        agent = await self._agent(ctx)
        task = await lanes.off_loop(self.board.mcp_tasks.cancel, agent, params.task_id) if agent else None
        if task is None:
            raise _unknown(params.task_id)
        runner = self._running.get(params.task_id)
        if runner is not None:
            runner.cancel()
        return {"resultType": "complete"}

    async def _own(self, ctx, task_id: str) -> dict:
        require_client_extension(ctx, IDENTIFIER)
        agent = await self._agent(ctx)
        task = await lanes.off_loop(self.board.mcp_tasks.get, agent, task_id) if agent else None
        if task is None:
            raise _unknown(task_id)
        return task

    async def _agent(self, ctx) -> str | None:
        context = Context(request_context=ctx, mcp_server=self.server)
        try:
            return await lanes.off_loop(self.identity.current, context)
        except Exception:  # a token of no agent: as unknown as no token (the tool call says more)
            return None


def _declared(ctx) -> bool:
    """Whether this request's client declared the extension (per request: 2026-07-28 and later only)."""
    if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and IDENTIFIER in capabilities.extensions)


def _unknown(task_id: str) -> MCPError:
    return MCPError(
        code=INVALID_PARAMS,
        message=f"no task {task_id[:100]!r} of yours: unknown, another agent's, or expired (tasks are kept an hour)",
    )


def _wire(task: dict, result_type: str) -> dict:
    """A task as the extension's Task shape (with its result or error once it has ended)."""
    out: dict[str, Any] = {
        "resultType": result_type,
        "taskId": task["id"],
        "status": task["status"],
        "createdAt": iso(task["created_at"]),
        "lastUpdatedAt": iso(task["updated_at"]),
        "ttlMs": int((task["expires_at"] - task["created_at"]) * 1000),
        "pollIntervalMs": POLL_MS,
    }
    if task["status_message"]:
        out["statusMessage"] = task["status_message"]
    if task["status"] == "completed":
        out["result"] = task["result"]
    elif task["status"] == "failed":
        out["error"] = task["error"]
    return out
