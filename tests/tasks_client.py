"""The requester side of the MCP Tasks extension (io.modelcontextprotocol/tasks), written from its specification
for the tests: the mcp 2.3 SDK has the client extension seam (mcp.client.extension) but no Tasks client.

`TasksClient()` in `Client(extensions=[...])` declares the extension on every request and resolves a task handle
the way the specification describes (tasks/get every pollIntervalMs until the task ends): `client.call_tool`
then returns the tool's final result. `client.session.call_tool(..., allow_claimed=True)` returns the handle
itself (`CreateTaskResult`), for tests that drive tasks/get and tasks/cancel themselves (`get`, `cancel`).
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, Field

IDENTIFIER = "io.modelcontextprotocol/tasks"


class _Task(Result):
    """The extension's Task shape (what a handle and tasks/get share)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str = Field(alias="taskId")
    status: str
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    ttl_ms: int | None = Field(alias="ttlMs")
    poll_interval_ms: int | None = Field(None, alias="pollIntervalMs")
    status_message: str | None = Field(None, alias="statusMessage")


class CreateTaskResult(_Task):
    result_type: Literal["task"] = Field("task", alias="resultType")


class GetTaskResult(_Task):
    result_type: str = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Acknowledged(Result):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: str = Field(alias="resultType")


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


class GetTaskRequest(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # the specification's Mcp-Name routing header


class UpdateTaskRequest(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get(session, task_id: str) -> GetTaskResult:
    return await session.send_request(GetTaskRequest(params=TaskParams(task_id=task_id)), GetTaskResult)


async def update(session, task_id: str, responses: dict) -> Acknowledged:
    params = UpdateParams(task_id=task_id, input_responses=responses)
    return await session.send_request(UpdateTaskRequest(params=params), Acknowledged)


async def cancel(session, task_id: str) -> Acknowledged:
    return await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), Acknowledged)


async def until_done(session, task_id: str, timeout: float = 60) -> GetTaskResult:
    """tasks/get until the task has ended (at the interval the server asks for, at most 0.2 s here)."""
    with anyio.fail_after(timeout):
        while True:
            task = await get(session, task_id)
            if task.status in ("completed", "failed", "cancelled"):
                return task
            await anyio.sleep(min(0.2, (task.poll_interval_ms or 1000) / 1000))


class TasksClient(ClientExtension):
    identifier = IDENTIFIER

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, handle: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        task = await until_done(ctx.session, handle.task_id, timeout=ctx.read_timeout_seconds or 600)
        if task.status == "completed":
            return CallToolResult.model_validate(task.result)
        if task.status == "failed":
            raise MCPError(code=task.error["code"], message=task.error["message"])
        raise MCPError(code=-32800, message=f"task {task.task_id} was cancelled")
