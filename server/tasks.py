"""Tools over cards: who am I, create, read, list, claim, release, update, complete."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from hiveboard.board import AcceptanceTests, Artifact, BoardView, Claim, NewTask, Page, Task, TaskEdit, TaskSummary
from hiveboard.memory.service import Hit

from .boundary import CHANGE, CREATE, IDEMPOTENT, MAX_ID, READ, Id, TaskId, Token, tool_boundary
from .deps import Deps

PREVIEW_CHARS = 4_000
log = logging.getLogger("hiveboard")


class WhoAmI(BaseModel):
    agent: str | None = Field(description="the agent this connection acts as; null until registered")
    role: str | None = None
    token: str | None = Field(None, description="bearer token for this agent, shown only when it was just "
                              "created; keep it to reconnect as this agent (whoami token=, or HTTP header)")
    message: str


class ClaimAnswer(Claim):
    lessons: list[Hit] = Field([], description="lessons and past critiques for this kind of work: read them "
                               "first; pass the ids that helped to complete_task as helpful_lessons")


class ListPage(Page):
    hint: str | None = Field(None, description="how to get the rest, when there is more")


def _summary(task: Task) -> TaskSummary:
    """Mutating tools answer with the compact card; get_task has the rest."""
    return TaskSummary(**task.model_dump(include=set(TaskSummary.model_fields)))


def _trim(task: Task, full: bool) -> Task:
    """Bound a card's long fields unless the caller asked for everything."""
    if full:
        return task

    def cut(text: str | None) -> str | None:
        if text is None or len(text) <= PREVIEW_CHARS:
            return text
        return (text[:PREVIEW_CHARS] + f"\n… {len(text) - PREVIEW_CHARS} more characters; call get_task with "
                f"task_id={task.id} full=true for all of it")

    return task.model_copy(update=dict(
        output=cut(task.output),
        artifacts=[a.model_copy(update=dict(content=cut(a.content))) for a in task.artifacts],
        acceptance_tests=task.acceptance_tests and task.acceptance_tests.model_copy(update=dict(
            files=[f.model_copy(update=dict(content=cut(f.content))) for f in task.acceptance_tests.files])),
    ))


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity, memory, wants_review = deps.board, deps.identity, deps.memory, deps.wants_review

    @mcp.tool(annotations=IDEMPOTENT)
    @tool_boundary
    def whoami(
        ctx: Context,
        name: Annotated[str | None, Field(description="register this connection as this agent (once); omit "
                                          "to just see who you are", max_length=64)] = None,
        role: Annotated[str | None, Field(description="your role, e.g. coder, reviewer, lead", max_length=40)] = None,
        token: Annotated[str | None, Field(description="the agent's token, to re-attach to an agent that "
                                           "already exists", max_length=200)] = None,
    ) -> WhoAmI:
        """Show who this connection acts as, or set it once with name= (identity is per connection)."""
        if name is None:
            current = identity.current(ctx)
            if current is None:
                return WhoAmI(agent=None, message="not registered: call whoami(name='your-agent-name')")
            agent = board.agents.get(current)
            return WhoAmI(agent=agent.name, role=agent.role, message=f"you are {agent.name}")
        agent, new_token, note = identity.bind(ctx, name, role, token)
        return WhoAmI(agent=agent.name, role=agent.role, token=new_token, message=note)

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def create_task(
        ctx: Context,
        title: Annotated[str, Field(description="short imperative title", min_length=1, max_length=200)],
        description: Annotated[str, Field(description="what to do and why; markdown")] = "",
        task_type: Annotated[str, Field(description="code, test, refactor, docs, design, bug, research, ops, "
                                        "or your own lowercase word", max_length=40)] = "code",
        priority: Literal["critical", "high", "medium", "low"] = "medium",
        labels: Annotated[list[str], Field(description="free labels, e.g. ['auth', 'backend']")] = [],
        depends_on: Annotated[list[Id], Field(description="ids of tasks that must be done first")] = [],
        acceptance_criteria: Annotated[list[str], Field(description="checkable statements of done")] = [],
        assignee: Annotated[str | None, Field(description="reserve the card for this agent")] = None,
        acceptance_tests: Annotated[AcceptanceTests | None, Field(
            description="tests that review runs against the claimer's work in the sandbox and the claimer cannot "
            "change: files (pytest) and/or '$ …' commands; hidden=true shows the claimer only that they exist")] = None,
        waive: Annotated[list[Annotated[str, Field(max_length=20)]], Field(
            description="analyser rule ids that are not defects for this card, e.g. ['B324'] when MD5 is the "
            "requirement: reported as info, never blocking", max_length=20)] = [],
    ) -> TaskSummary:
        """Add a card to the todo column."""
        actor = identity.require(ctx)
        return _summary(board.create(actor, NewTask(
            title=title, description=description, task_type=task_type, priority=priority, labels=labels,
            depends_on=depends_on, acceptance_criteria=acceptance_criteria, assignee=assignee, waive=waive,
            acceptance_tests=acceptance_tests)))

    @mcp.tool(annotations=READ)
    @tool_boundary
    def get_task(
        ctx: Context,
        task_id: TaskId,
        full: Annotated[bool, Field(description="include long output and artifacts in full")] = False,
        history: Annotated[int, Field(description="how many recent history entries", ge=0, le=100)] = 20,
    ) -> Task:
        """One card in full: fields, dependencies, output, artifacts and its history of transitions."""
        return _trim(board.get(task_id, history=history, viewer=identity.current(ctx)), full)

    @mcp.tool(annotations=READ)
    @tool_boundary
    def list_tasks(
        status: Literal["todo", "in_progress", "review", "done", "blocked", "needs_human"] | None = None,
        task_type: Annotated[str | None, Field(max_length=40)] = None,
        assignee: Annotated[str | None, Field(max_length=64)] = None,
        label: Annotated[str | None, Field(max_length=50)] = None,
        ready: Annotated[bool | None, Field(description="true: only cards whose dependencies are done")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        cursor: Annotated[str | None, Field(description="next_cursor from the previous page")] = None,
    ) -> ListPage:
        """Cards matching filters, highest priority first, in bounded pages."""
        page = board.list(status=status, task_type=task_type, assignee=assignee, label=label, ready=ready,
                          limit=limit, cursor=cursor)
        hint = None
        if page.next_cursor:
            hint = (f"{page.total - len(page.tasks)} more may follow; call list_tasks with the same filters "
                    f"and cursor={page.next_cursor!r}")
        return ListPage(**page.model_dump(), hint=hint)

    @mcp.tool(annotations=READ)
    @tool_boundary
    def get_board(top: Annotated[int, Field(description="cards shown per column", ge=0, le=50)] = 3) -> BoardView:
        """The board at a glance: each column's count and top cards, and how many cards are ready."""
        return board.board(top=top)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def claim_task(
        ctx: Context,
        task_id: Annotated[int | None, Field(description="the card to take; omit to take the next ready one",
                                             ge=1, le=MAX_ID)] = None,
        task_type: Annotated[str | None, Field(description="with no task_id: only cards of this type",
                                               max_length=40)] = None,
    ) -> ClaimAnswer:
        """Take a card atomically: you get a lease, a fencing token and lessons from past work, or a refusal."""
        agent = identity.require(ctx)
        claim = board.claim(agent, task_id=task_id, task_type=task_type)
        lessons: list[Hit] = []
        if memory is not None and claim.claimed:
            try:
                lessons = memory.context_for(agent, claim.task)
            except Exception:  # the claim has committed: its holder must still learn its token
                log.exception("lessons for task %s could not be read", claim.task.id)
                claim = claim.model_copy(update={"message": claim.message + "; past lessons could not be read "
                                                 "just now (query_memory later)"})
        return ClaimAnswer(**dict(claim), lessons=lessons)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def release_task(
        ctx: Context, task_id: TaskId, token: Token,
        reason: Annotated[str | None, Field(description="why you are giving it back")] = None,
    ) -> TaskSummary:
        """Give a card you hold back to todo for someone else."""
        return _summary(board.release(identity.require(ctx), task_id, token, reason))

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def update_task(
        ctx: Context,
        task_id: TaskId,
        token: Annotated[int | None, Field(description="your fencing token; needed on a card you hold",
                                           ge=0, le=MAX_ID)] = None,
        note: Annotated[str | None, Field(description="a progress note for the history")] = None,
        status: Annotated[Literal["blocked", "in_progress", "todo", "needs_human"] | None,
                          Field(description="blocked/needs_human (with reason), in_progress to resume a blocked "
                                "card, todo to unblock a card for anyone")] = None,
        reason: Annotated[str | None, Field(description="why (required for blocked and needs_human)")] = None,
        title: Annotated[str | None, Field(max_length=200)] = None,
        description: str | None = None,
        priority: Literal["critical", "high", "medium", "low"] | None = None,
        labels: list[str] | None = None,
        acceptance_criteria: list[str] | None = None,
        expected_version: Annotated[int | None, Field(description="refuse the update if the card changed since "
                                                      "this version (from get_task)", ge=1, le=MAX_ID)] = None,
    ) -> TaskSummary:
        """Note progress or send just your token (both renew your lease), block/unblock/escalate a card, or
        edit its fields."""
        edit = TaskEdit(title=title, description=description, priority=priority, labels=labels,
                        acceptance_criteria=acceptance_criteria)
        return _summary(board.update(identity.require(ctx), task_id, token=token, note=note, status=status,
                                     reason=reason, edit=edit, expected_version=expected_version))

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def complete_task(
        ctx: Context,
        task_id: TaskId,
        token: Token,
        output: Annotated[str, Field(description="what you did and the result")],
        summary: Annotated[str | None, Field(description="one or two lines for the board", max_length=2000)] = None,
        artifacts: Annotated[list[Artifact], Field(description="files or texts produced, each with name, kind "
                                                   "and content")] = [],
        helpful_lessons: Annotated[list[Id], Field(
                                   max_length=50, description="ids of the lessons claim_task handed you that "
                                                    "helped (feeds the memory's reuse rate)")] = [],
    ) -> TaskSummary:
        """Hand in your work on a card you hold: it moves to review (critics run in the background; see
        get_review) or, with review off, to done. Returns at once."""
        actor = identity.require(ctx)
        to_status = "review" if wants_review is not None and wants_review(board.get(task_id, history=0)) else "done"
        return _summary(board.complete(actor, task_id, token, output, summary, artifacts, to_status,
                                       helpful=helpful_lessons))
