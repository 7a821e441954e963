"""The MCP surface: tools and resources over the board. Each tool is a thin call into `board/`.

Identity comes from the connection (see identity.py), never from an argument. Board errors become
tool errors with the board's message, which says what was wrong and what to send instead.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import json
import time
import weakref
from contextlib import asynccontextmanager
from collections.abc import Callable
from typing import Annotated, Literal

import anyio
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field, ValidationError

from hiveboard.board.messages import Message, MessagePage, NewMessage, Subscription
from hiveboard.board import (
    AcceptanceTests,
    Artifact,
    Board,
    BoardError,
    BoardView,
    Claim,
    NewTask,
    Page,
    Task,
    TaskEdit,
    TaskSummary,
)

from hiveboard.board.reviews import BoardStats, Critique, CritiqueRecord, ReviewIssue, Resolution, ReviewTrail
from hiveboard.critics.engine import ReviewEngine
from hiveboard.memory.errors import EmbeddingError, EmbeddingMismatch, IndexUnavailable
from hiveboard.memory.service import Hit, Memory, Recorded, Results

from .identity import Identity
from .wakeup import wakeup_for

INSTRUCTIONS = """hiveboard: a Kanban board shared by a team of agents.
Start with whoami (set your name once if the operator did not), then get_board or claim_task.
claim_task gives you a card and a fencing token; pass the token to update_task, release_task
and complete_task. Your lease is renewed by update_task (a note, or the token alone); an expired lease returns the
card to todo and your token stops working. complete_task moves the card to review: critics check it in the
background and it comes back to you (a 'critique' message with a revision brief) or goes to done;
follow it with get_review(task_id, wait_seconds=…). Agents with the role 'critic' receive review
requests and answer with submit_critique."""

MAX_ID = 2**63 - 1  # SQLite's INTEGER range
TaskId = Annotated[int, Field(description="task id, as shown by list_tasks or get_board", ge=1, le=MAX_ID)]
Token = Annotated[int, Field(description="the fencing token claim_task returned for this card", ge=0, le=MAX_ID)]
PREVIEW_CHARS = 4_000
MAX_TAGS = 20  # tags of a memory item, or asked for in a search: each is a metadata key in Chroma
Tag = Annotated[str, Field(min_length=1, max_length=50)]

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
CREATE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
CHANGE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)
IDEMPOTENT = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)


class WhoAmI(BaseModel):
    agent: str | None = Field(description="the agent this connection acts as; null until registered")
    role: str | None = None
    token: str | None = Field(None, description="bearer token for this agent, shown only when it was just "
                              "created; keep it to reconnect as this agent (whoami token=, or HTTP header)")
    message: str


class ClaimAnswer(Claim):
    lessons: list[Hit] = Field([], description="lessons and past critiques for this kind of work: read them "
                               "first; pass the ids that helped to complete_task as helpful_lessons")


class Subscriptions(BaseModel):
    subscriptions: list[Subscription]


class ListPage(Page):
    hint: str | None = Field(None, description="how to get the rest, when there is more")


def as_result(value: BaseModel) -> CallToolResult:
    """Structured output plus its text twin as compact JSON without nulls (the SDK's default text is
    indented and keeps every null, which costs the reading model tokens and every call bytes)."""
    return CallToolResult(content=[TextContent(type="text", text=value.model_dump_json(exclude_none=True))],
                          structured_content=value.model_dump(mode="json"))


TOOL_ERRORS = (BoardError, EmbeddingError, EmbeddingMismatch, IndexUnavailable)


def check_text(value, where: str) -> None:
    """Refuse text that cannot be stored and read back for everyone: NUL characters and lone UTF-16
    surrogates (which JavaScript clients can send), anywhere in an argument."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ToolError(f"{where} contains a NUL character (\\u0000); send the text without it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(f"{where} contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid "
                            "Unicode; send valid UTF-8 text") from None
    elif isinstance(value, BaseModel):
        check_text(value.model_dump(), where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"a key of {where}")
            check_text(item, f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else where)
    elif isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            check_text(item, f"{where}[{n}]")


def _check_arguments(kwargs: dict) -> None:
    for name, value in kwargs.items():
        if not isinstance(value, Context):
            check_text(value, name)


def board_errors(fn: Callable) -> Callable:
    """The tools' boundary: refuse text that cannot be stored (before anything is written), turn board
    and memory errors into tool errors the model can read (nothing was written), compact results. Works
    on sync and async tools."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            _check_arguments(kwargs)
            try:
                return as_result(await fn(*args, **kwargs))
            except TOOL_ERRORS as exc:
                raise ToolError(str(exc)) from exc

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _check_arguments(kwargs)
        try:
            return as_result(fn(*args, **kwargs))
        except TOOL_ERRORS as exc:
            raise ToolError(str(exc)) from exc

    return wrapper


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


class StrictServer(MCPServer):
    """An MCPServer whose tools refuse unknown arguments (with a did-you-mean) and answer a rejected
    argument with one sentence naming it, instead of pydantic's dump."""

    _parameters: dict[str, list[str]] | None = None

    async def call_tool(self, name: str, arguments: dict, context=None):
        if self._parameters is None:
            self._parameters = {t.name: list(t.input_schema.get("properties", {})) for t in await self.list_tools()}
        known = self._parameters.get(name)
        if known is not None:
            unknown = [key for key in arguments if key not in known]
            if unknown:
                raise ToolError(_unknown_arguments(name, unknown, known))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_rejected(name, exc.__cause__)) from None
            raise


def _unknown_arguments(tool: str, unknown: list[str], known: list[str]) -> str:
    guesses = [f"{key!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(key, known, 1)) else
               repr(key) for key in unknown[:5]]
    return (f"{tool} has no argument {', '.join(guesses)}; nothing was done. It takes: {', '.join(known)}")


def _rejected(tool: str, error: ValidationError) -> str:
    """One sentence: which argument, what was wrong with it (pydantic's message, without the dump)."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "the arguments"
    more = f" ({len(problems) - 1} more problem(s) after you fix it)" if len(problems) > 1 else ""
    return f"{tool}: argument {where!r}: {first['msg']}; nothing was done{more}"


def build_server(board: Board, identity: Identity, *, memory: Memory | None = None,
                 review: ReviewEngine | None = None, wants_review: Callable[[Task], bool] | None = None) -> MCPServer:
    """The hiveboard MCP server over one board.

    With `review` (the review engine), completed cards go to `review` and a job is queued for the
    review worker (which the caller runs: `hiveboard serve` starts one); `wants_review` overrides
    which cards. With neither, completed cards go straight to done.
    """
    if wants_review is None and review is not None:
        wants_review = review.wants_review
    wakeup = wakeup_for(board.store)
    bus = InMemorySubscriptionBus()
    review_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def review_committed(events: list) -> None:  # store listener, any thread
        if any(event[0] in ("review", "critique") for event in events):
            for loop, changed in list(review_waiters):
                loop.call_soon_threadsafe(changed.set)

    board.store.listeners.append(review_committed)

    @asynccontextmanager
    async def lifespan(_server):
        loop = asyncio.get_running_loop()

        def inbox_changed(agents: set[str]) -> None:
            # any thread: tell MCP clients listening on these inboxes' resources
            for agent in agents:
                uri = f"hiveboard://inbox/{agent}"
                asyncio.run_coroutine_threadsafe(bus.publish(ResourceUpdated(uri=uri)), loop)
                for connection in list(legacy_subscribers.get(uri, ())):
                    asyncio.run_coroutine_threadsafe(
                        connection.notify("notifications/resources/updated", {"uri": uri}), loop)

        wakeup.on_agents.append(inbox_changed)
        try:
            async with wakeup.watching():
                yield {}
        finally:
            wakeup.on_agents.remove(inbox_changed)

    mcp = StrictServer("hiveboard", instructions=INSTRUCTIONS, version="0.1.0", lifespan=lifespan,
                       subscriptions=bus)

    # Clients on the session protocol (2025-11-25) subscribe with resources/subscribe instead of
    # subscriptions/listen; keep their connections per inbox URI until the connection goes away.
    legacy_subscribers: dict[str, weakref.WeakSet] = {}

    def _own_inbox(rctx, uri: str) -> None:
        me = identity.current(Context(request_context=rctx, mcp_server=mcp))
        if uri != f"hiveboard://inbox/{me}":
            raise MCPError(INVALID_PARAMS, f"you can subscribe only to your own inbox (hiveboard://inbox/{me})")

    async def subscribe_resource(rctx, params: SubscribeRequestParams) -> EmptyResult:
        _own_inbox(rctx, params.uri)
        legacy_subscribers.setdefault(params.uri, weakref.WeakSet()).add(rctx.session._connection)
        return EmptyResult()

    async def unsubscribe_resource(rctx, params: UnsubscribeRequestParams) -> EmptyResult:
        legacy_subscribers.get(params.uri, weakref.WeakSet()).discard(rctx.session._connection)
        return EmptyResult()

    # subscriptions/listen (2026-07-28): the SDK's handler, behind the same rule as resources/subscribe
    listen = ListenHandler(bus)

    async def listen_guarded(rctx, params: SubscriptionsListenRequestParams):
        for uri in params.notifications.resource_subscriptions or ():
            if uri.startswith("hiveboard://inbox/"):
                _own_inbox(rctx, uri)
        return await listen(rctx, params)

    mcp._lowlevel_server.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, listen_guarded)
    mcp._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe_resource)
    mcp._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe_resource)

    @mcp.tool(annotations=IDEMPOTENT)
    @board_errors
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
    @board_errors
    def create_task(
        ctx: Context,
        title: Annotated[str, Field(description="short imperative title", min_length=1, max_length=200)],
        description: Annotated[str, Field(description="what to do and why; markdown")] = "",
        task_type: Annotated[str, Field(description="code, test, refactor, docs, design, bug, research, ops, "
                                        "or your own lowercase word", max_length=40)] = "code",
        priority: Literal["critical", "high", "medium", "low"] = "medium",
        labels: Annotated[list[str], Field(description="free labels, e.g. ['auth', 'backend']")] = [],
        depends_on: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]], Field(description="ids of tasks that must be done first")] = [],
        acceptance_criteria: Annotated[list[str], Field(description="checkable statements of done")] = [],
        assignee: Annotated[str | None, Field(description="reserve the card for this agent")] = None,
        acceptance_tests: Annotated[AcceptanceTests | None, Field(
            description="tests that review runs against the claimer's work in the sandbox and the claimer cannot "
            "change: files (pytest) and/or '$ …' commands; hidden=true shows the claimer only that they exist")] = None,
    ) -> TaskSummary:
        """Add a card to the todo column."""
        actor = identity.require(ctx)
        return _summary(board.create(actor, NewTask(
            title=title, description=description, task_type=task_type, priority=priority, labels=labels,
            depends_on=depends_on, acceptance_criteria=acceptance_criteria, assignee=assignee,
            acceptance_tests=acceptance_tests)))

    @mcp.tool(annotations=READ)
    @board_errors
    def get_task(
        ctx: Context,
        task_id: TaskId,
        full: Annotated[bool, Field(description="include long output and artifacts in full")] = False,
        history: Annotated[int, Field(description="how many recent history entries", ge=0, le=100)] = 20,
    ) -> Task:
        """One card in full: fields, dependencies, output, artifacts and its history of transitions."""
        return _trim(board.get(task_id, history=history, viewer=identity.current(ctx)), full)

    @mcp.tool(annotations=READ)
    @board_errors
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
    @board_errors
    def get_board(top: Annotated[int, Field(description="cards shown per column", ge=0, le=50)] = 3) -> BoardView:
        """The board at a glance: each column's count and top cards, and how many cards are ready."""
        return board.board(top=top)

    @mcp.tool(annotations=CHANGE)
    @board_errors
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
        lessons = memory.context_for(agent, claim.task) if memory is not None and claim.claimed else []
        return ClaimAnswer(**dict(claim), lessons=lessons)

    @mcp.tool(annotations=CHANGE)
    @board_errors
    def release_task(
        ctx: Context, task_id: TaskId, token: Token,
        reason: Annotated[str | None, Field(description="why you are giving it back")] = None,
    ) -> TaskSummary:
        """Give a card you hold back to todo for someone else."""
        return _summary(board.release(identity.require(ctx), task_id, token, reason))

    @mcp.tool(annotations=CHANGE)
    @board_errors
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
    @board_errors
    def complete_task(
        ctx: Context,
        task_id: TaskId,
        token: Token,
        output: Annotated[str, Field(description="what you did and the result")],
        summary: Annotated[str | None, Field(description="one or two lines for the board", max_length=2000)] = None,
        artifacts: Annotated[list[Artifact], Field(description="files or texts produced, each with name, kind "
                                                   "and content")] = [],
        helpful_lessons: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]], Field(
                                   max_length=50, description="ids of the lessons claim_task handed you that "
                                                    "helped (feeds the memory's reuse rate)")] = [],
    ) -> TaskSummary:
        """Hand in your work on a card you hold: it moves to review (critics run in the background; see
        get_review) or, with review off, to done. Returns at once."""
        actor = identity.require(ctx)
        to_status = "review" if wants_review is not None and wants_review(board.get(task_id, history=0)) else "done"
        return _summary(board.complete(actor, task_id, token, output, summary, artifacts, to_status,
                                       helpful=helpful_lessons))

    # ------------------------------------------------------------------ review

    @mcp.tool(annotations=READ)
    @board_errors
    async def get_review(
        ctx: Context,
        task_id: Annotated[int | None, Field(description="the card whose review trajectory you want", ge=1,
                                             le=MAX_ID)] = None,
        review_id: Annotated[int | None, Field(description="or a review id (from a review.request message)",
                                               ge=1, le=MAX_ID)] = None,
        wait_seconds: Annotated[float, Field(description="wait up to this long for the latest round to finish, "
                                             "with progress notifications while critics report", ge=0,
                                             le=600)] = 0,
    ) -> ReviewTrail:
        """A card's whole review: every round, every critique (including failed ones), every synthesis."""
        if (task_id is None) == (review_id is None):
            raise ToolError("pass task_id or review_id (one of them)")
        if task_id is None:
            task_id = await anyio.to_thread.run_sync(board.reviews.review_of, review_id)
        trail = await anyio.to_thread.run_sync(board.reviews.trail, task_id)
        deadline = time.monotonic() + wait_seconds
        reported = None
        changed = asyncio.Event()
        waiter = (asyncio.get_running_loop(), changed)
        review_waiters.add(waiter)
        try:
            while trail.rounds and trail.rounds[-1].status != "finished" and time.monotonic() < deadline:
                latest = trail.rounds[-1]
                done = sum(c.status not in ("running", "pending") for c in latest.critiques)
                if (done, len(latest.critiques)) != reported:
                    reported = (done, len(latest.critiques))
                    await ctx.report_progress(done, len(latest.critiques) or None,
                                              f"round {latest.round}: {done} of {len(latest.critiques)} critics done")
                # woken by this process's review commits; a worker in another process is seen within 0.25 s
                with anyio.move_on_after(min(0.25, max(0.0, deadline - time.monotonic()))):
                    await changed.wait()
                changed.clear()
                trail = await anyio.to_thread.run_sync(board.reviews.trail, task_id)
        finally:
            review_waiters.discard(waiter)
        return trail

    @mcp.tool(annotations=CREATE)
    @board_errors
    def submit_critique(
        ctx: Context,
        review_id: Annotated[int, Field(description="from the review.request message", ge=1, le=MAX_ID)],
        lens: Annotated[str, Field(description="one open lens of that review (security, correctness, …)",
                                   max_length=40)],
        verdict: Literal["PASS", "CONDITIONAL", "FAIL"],
        score: Annotated[int, Field(description="10 excellent, 7-9 good, 4-6 significant issues, 1-3 major "
                                    "problems", ge=1, le=10)],
        summary: Annotated[str, Field(min_length=1, max_length=4000)],
        issues: Annotated[list[ReviewIssue], Field(description="what is wrong, each with severity (critical, "
                                                   "major, minor, info), category, location, description, "
                                                   "suggestion", max_length=50)] = [],
        resolutions: Annotated[list[Resolution], Field(description="round 2+: for each of your earlier issues "
                                                       "(ref from get_review), resolved / partial / "
                                                       "not_addressed", max_length=50)] = [],
    ) -> CritiqueRecord:
        """As an agent critic, review one lens of someone else's work (first submission per lens counts)."""
        critique = Critique(verdict=verdict, score=score, summary=summary, issues=issues, resolutions=resolutions)
        return board.reviews.submit(identity.require(ctx), review_id, lens.strip().lower(), critique)

    @mcp.tool(annotations=READ)
    @board_errors
    def board_stats() -> BoardStats:
        """How review and memory are doing: first-pass PASS rate, rounds per card, critique success and
        per-critic contribution, review latency, messages per task, memory reuse."""
        return board.reviews.stats()

    # ------------------------------------------------------------------ messages

    @mcp.tool(annotations=CREATE)
    @board_errors
    def publish_message(
        ctx: Context,
        intent: Annotated[str, Field(description="what kind of message: status_update, request_help, answer, "
                                     "test_results, output.updated, critique, approval, proposal, "
                                     "consensus_reached, … or your own lowercase word", max_length=40)],
        content: Annotated[str, Field(description="the message itself")] = "",
        summary: Annotated[str | None, Field(description="one line; defaults to the first line of content")] = None,
        recipient: Annotated[str | None, Field(description="an agent name, 'role:<role>', 'everyone', or omit "
                                               "to post to the pool (the task's people and subscribers see "
                                               "it); a reply goes to the replied-to sender by default")] = None,
        task_id: Annotated[int | None, Field(description="the task this is about", ge=1, le=MAX_ID)] = None,
        thread: Annotated[str | None, Field(description="channel or thread name, e.g. 'api-design'; defaults "
                                            "to the task's thread or the replied-to message's")] = None,
        reply_to: Annotated[int | None, Field(description="id of the message this answers", ge=1, le=MAX_ID)] = None,
        priority: Literal["low", "normal", "high", "urgent"] = "normal",
        metadata: Annotated[dict, Field(description="small JSON object of extra fields")] = {},
    ) -> Message:
        """Send a message to an agent, a role, everyone, or the pool. You are the sender."""
        return board.messages.publish(identity.require(ctx), NewMessage(
            intent=intent, content=content, summary=summary, recipient=recipient, task_id=task_id,
            thread=thread, reply_to=reply_to, priority=priority, metadata=metadata))

    @mcp.tool(annotations=CREATE)  # not read-only: reading the inbox marks messages read
    @board_errors
    async def get_messages(
        ctx: Context,
        box: Annotated[Literal["inbox", "pool"], Field(description="inbox: messages to you, your role, "
                                                       "everyone or your subscriptions; pool: the shared log "
                                                       "(e.g. a task's or thread's whole history)")] = "inbox",
        unread_only: Annotated[bool, Field(description="inbox: only unread (they are then marked read); "
                                           "false: unread first, then read, without changing read state")] = True,
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        intent: Annotated[str | None, Field(max_length=40)] = None,
        thread: Annotated[str | None, Field(max_length=80)] = None,
        sender: Annotated[str | None, Field(max_length=64)] = None,
        since: Annotated[str | None, Field(description="ISO 8601 time; only messages from then on")] = None,
        full: Annotated[bool, Field(description="full content instead of a 280-character preview")] = False,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor from the previous page")] = None,
        wait_seconds: Annotated[float, Field(description="inbox: if nothing matches, wait up to this long for "
                                             "a new message instead of returning empty", ge=0, le=300)] = 0,
        ack: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]], Field(
            description="ids of inbox messages you have handled: acknowledged (and marked read) first, all or "
                        "nothing", max_length=500)] = [],
    ) -> MessagePage:
        """Read your inbox (or the shared pool), acknowledge handled messages, or wait for the next one."""
        filters = dict(task_id=task_id, intent=intent, thread=thread, sender=sender, since=since, full=full,
                       limit=limit, cursor=cursor)
        agent = await anyio.to_thread.run_sync(identity.require, ctx) if (box == "inbox" or ack) else None
        board.messages.check_query(since, cursor)  # a bad query writes nothing, acks included
        acked = await anyio.to_thread.run_sync(board.messages.ack, agent, ack) if ack else None
        if box == "pool":
            page = await anyio.to_thread.run_sync(functools.partial(board.messages.pool, **filters))
            return page.model_copy(update={"acked": acked})
        deadline = time.monotonic() + wait_seconds
        while True:
            mark = wakeup.mark(agent)  # before the check, so a publish in between still wakes us
            page = await anyio.to_thread.run_sync(functools.partial(
                board.messages.inbox, agent, unread_only=unread_only, **filters))
            remaining = deadline - time.monotonic()
            if page.messages or remaining <= 0:
                return page.model_copy(update={"acked": acked})
            await wakeup.wait(agent, mark, remaining)

    @mcp.tool(annotations=IDEMPOTENT)
    @board_errors
    def subscribe(
        ctx: Context,
        kind: Annotated[Literal["intent", "task", "channel"], Field(description="what to follow")],
        value: Annotated[str, Field(description="the intent (e.g. output.complete), task id, or channel name",
                                    min_length=1, max_length=80)],
        unsubscribe: Annotated[bool, Field(description="true to stop following it")] = False,
    ) -> Subscriptions:
        """Follow (or stop following) an intent, a task or a channel: matching messages land in your inbox."""
        agent = identity.require(ctx)
        return Subscriptions(subscriptions=board.messages.subscribe(agent, kind, value, on=not unsubscribe))

    # ------------------------------------------------------------------ memory

    if memory is not None:

        @mcp.tool(annotations=READ)
        @board_errors
        def query_memory(
            query: Annotated[str, Field(description="what you are looking for, in words", min_length=1,
                                        max_length=2000)],
            task_type: Annotated[str | None, Field(description="only items of this task type", max_length=40)] = None,
            kinds: Annotated[list[Literal["lesson", "critique", "output", "message", "note"]] | None,
                             Field(description="only these kinds")] = None,
            tags: Annotated[list[Tag] | None, Field(description="only items with all these tags",
                                                    max_length=MAX_TAGS)] = None,
            k: Annotated[int, Field(description="how many results", ge=1, le=20)] = 5,
            include_deprecated: Annotated[bool, Field(description="also superseded items")] = False,
            mode: Annotated[Literal["hybrid", "vector", "keyword"], Field(description="hybrid: meaning and "
                            "keywords fused (best); vector or keyword alone")] = "hybrid",
        ) -> Results:
            """Search the team's shared memory — lessons, critiques, task outputs, messages — by meaning and keyword."""
            return memory.query(query, task_type=task_type, kinds=kinds, tags=tags, k=k,
                                include_deprecated=include_deprecated, mode=mode)

        @mcp.tool(annotations=CREATE)
        @board_errors
        def record_lesson(
            ctx: Context,
            problem: Annotated[str, Field(description="what went wrong (or could)", min_length=1, max_length=4000)],
            fix: Annotated[str, Field(description="how it was fixed / what to do instead", min_length=1,
                                      max_length=4000)],
            task_type: Annotated[str, Field(description="the kind of task it applies to: code, test, docs, …",
                                            max_length=40)],
            title: Annotated[str | None, Field(max_length=200)] = None,
            tags: Annotated[list[Tag], Field(description="e.g. ['sql', 'security']", max_length=MAX_TAGS)] = [],
            task_id: Annotated[int | None, Field(description="the task it came from", ge=1, le=MAX_ID)] = None,
            supersedes: Annotated[int | None, Field(description="id of an older lesson this one replaces (it is "
                                                    "then hidden from searches)", ge=1, le=MAX_ID)] = None,
        ) -> Recorded:
            """Teach the team: store a lesson for the next agent doing this type of task (duplicates are merged)."""
            return memory.record_lesson(identity.require(ctx), problem=problem, fix=fix, task_type=task_type,
                                        title=title, tags=tags, task_id=task_id, supersedes=supersedes)

    # ------------------------------------------------------------------ resources

    @mcp.resource("hiveboard://board", name="board", description="The board: columns, counts and top cards",
                  mime_type="application/json")
    def board_resource() -> str:
        return board.board(top=10).model_dump_json()

    @mcp.resource("hiveboard://stats", name="stats", description="Review and memory metrics (board_stats)",
                  mime_type="application/json")
    def stats_resource() -> str:
        return board.reviews.stats().model_dump_json()

    @mcp.resource("hiveboard://tasks/{task_id}", name="task", description="One card in full, with its history",
                  mime_type="application/json")
    def task_resource(task_id: int) -> str:
        try:
            return board.get(int(task_id)).model_dump_json()
        except BoardError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @mcp.resource("hiveboard://inbox/{agent}", name="inbox", mime_type="application/json",
                  description="An agent's unread messages (summaries); subscribe to be told when it changes")
    def inbox_resource(agent: str, ctx: Context) -> str:
        me = identity.current(ctx)
        if me != agent.lower():
            raise ResourceError(f"you can read only your own inbox (hiveboard://inbox/{me})")
        page = board.messages.inbox(me, unread_only=True, mark_read=False, limit=20)
        return page.model_dump_json()

    # Prompts: what an operator would pick as a slash command in the client.
    @mcp.prompt(name="work-the-board", title="Join the team and work the board",
                description="Register, read the board, then claim, do and hand in cards until none is ready")
    def work_the_board(name: str = "", task_type: str = "") -> str:
        who = f"whoami(name={name!r})" if name else "whoami (and, if it says you are not registered, whoami(name=...))"
        kind = f" with task_type={task_type!r}" if task_type else ""
        return (f"You are an agent on a shared hiveboard Kanban board. First call {who}. Then call get_board and "
                f"get_messages to see what is going on. Loop: call claim_task{kind} to take the next ready card; read "
                "its description, acceptance criteria, acceptance tests and the lessons it hands you; do the work, "
                "keeping your lease with update_task(note=...) while you work; call complete_task with your token, "
                "an output, a summary and your files as artifacts (tests as kind 'test'); follow the review with "
                "get_review(task_id, wait_seconds=120). On FAIL, fix what the brief lists first and complete again. "
                "When blocked, say why with update_task(status='blocked', reason=...) and ask for help with "
                "publish_message(intent='request_help'). Stop when claim_task finds no ready card.")

    @mcp.prompt(name="review-as-critic", title="Review others' work as a critic",
                description="Wait for review requests and answer each with a structured critique in your lens")
    def review_as_critic(lens: str = "") -> str:
        which = f"the {lens} lens" if lens else "the lens each request names"
        return ("You are a critic on a hiveboard board (the operator gave you the role 'critic'). Loop: call "
                "get_messages(intent='review.request', wait_seconds=300). For each request, read the card with "
                "get_task and your earlier issues with get_review, then judge the work through " + which + " only, "
                "and call submit_critique(review_id, lens, verdict, score, summary, issues, resolutions): each "
                "issue with severity, category, location, description and a concrete suggestion; from round 2, "
                "one resolution per earlier issue of yours. Do not review your own work.")

    @mcp.prompt(name="plan-feature", title="Plan a feature into cards",
                description="Break a feature into small cards with dependencies, acceptance criteria and tests")
    def plan_feature(feature: str) -> str:
        return (f"Plan this feature for a team of agents on a hiveboard board: {feature}\n\nCall get_board and "
                "list_tasks first so you do not duplicate cards. Then create one card per independently reviewable "
                "step with create_task: a short imperative title, a description saying what and why, the "
                "task_type (code, test, docs, design, ...), a priority, depends_on for the order, acceptance_criteria "
                "that can be checked (a '$ python -m pytest -q' line where tests decide), and, for code, "
                "acceptance_tests with test files the claimer cannot change (hidden=true to keep them from being "
                "gamed). Finish with get_board and a short summary of the plan.")

    return mcp


def tool_token_costs(mcp_tools: list) -> list[tuple[str, int, int]]:
    """Approximate context cost of each tool definition, in tokens (JSON characters / 4).

    Returns (name, what every client sends the model: name, description, input schema and
    annotations; the output schema, which only some clients pass on).
    """
    costs = []
    for tool in mcp_tools:
        wire = tool.model_dump(exclude_none=True, by_alias=True)
        output = wire.pop("outputSchema", {})
        costs.append((tool.name, len(json.dumps(wire)) // 4, len(json.dumps(output)) // 4))
    return costs
