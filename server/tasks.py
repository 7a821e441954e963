"""Tools over cards: who am I, create, read, list, claim, release, update, complete."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from hiveboard.board._sqlite_utils import Database
from hiveboard.board.commits import BOTH, Target
from hiveboard.board.digest_store import Digest
from hiveboard.board.errors import BoardError, InvalidInput
from hiveboard.board.flags import FlagKind
from hiveboard.board.models import (
    AcceptanceTests,
    Artifact,
    BoardView,
    Claim,
    Commit,
    NewTask,
    Page,
    Priority,
    Status,
    Task,
    TaskEdit,
    TaskSummary,
)
from hiveboard.critics.git import GitError
from hiveboard.memory.service import Hit

from . import lanes
from .board_app import UI
from .boundary import CHANGE, CREATE, IDEMPOTENT, MAX_ID, READ, Id, TaskId, Token, tool_boundary
from .deps import Deps
from .worktrees import PROBLEMS as WORKTREE_PROBLEMS
from .worktrees import Given, why

PREVIEW_CHARS = 4_000
PREVIEW_FILES = 50  # of a commit's changed files, without full=true
FULL_CHARS = 100_000  # what one get_task(full=true) carries at most (about what MCP clients show of one answer)
log = logging.getLogger("hiveboard")


class WhoAmI(BaseModel):
    agent: str | None = Field(description="the agent this connection acts as; null until registered")
    role: str | None = None
    token: str | None = Field(
        None,
        description="bearer token for this agent, shown only when it was just "
        "created; keep it to reconnect as this agent (whoami token=, or HTTP header)",
    )
    message: str


class ClaimAnswer(Claim):
    worktree: str | None = Field(None, description="with worktree=true: the git worktree to work and commit in")
    branch: str | None = Field(None, description="its branch, yours: hb/<agent>/<card>")
    copied: list[str] = Field([], description="env files copied into it from the main worktree (.worktreeinclude)")
    digest: Digest | None = Field(
        None,
        description="the common rules of this task type, grouped from its lessons "
        "with counts (hiveboard://digest/{task_type}); read it first",
    )
    lessons: list[Hit] = Field(
        [],
        description="lessons and past critiques for this kind of work: read them "
        "first; pass the ids that helped to complete_task as helpful_lessons",
    )


class ListPage(Page):
    hint: str | None = Field(None, description="how to get the rest, when there is more")


def _trim(task: Task, full: bool, artifact: str | None = None) -> Task:
    """Bound a card's long fields unless the caller asked for everything; everything is bounded too (one
    answer carries at most FULL_CHARS of output and artifacts; the rest is asked for by artifact name)."""
    if artifact is not None:
        named = [a for a in task.artifacts if a.name == artifact]
        if not named:
            names = ", ".join(repr(a.name) for a in task.artifacts[:20]) or "none"
            raise InvalidInput(f"task {task.id} has no artifact {artifact!r}; its artifacts: {names}")
        return _trim(task, False).model_copy(update=dict(artifacts=named))  # the rest as previews
    budget = FULL_CHARS if full else 0

    def cut(text: str | None, hint: str) -> str | None:
        nonlocal budget
        if text is None or len(text) <= PREVIEW_CHARS:
            return text
        if len(text) <= budget:
            budget -= len(text)
            return text
        return text[:PREVIEW_CHARS] + f"\n… {len(text) - PREVIEW_CHARS} more characters; {hint}"

    more = (
        f"this answer's {FULL_CHARS:,} characters are spent: call get_task with task_id={task.id} artifact=<name> for it"
        if full
        else f"call get_task with task_id={task.id} full=true for all of it"
    )
    output = cut(task.output, more if not full else f"this answer's {FULL_CHARS:,} characters are spent")
    commit = task.commit
    if commit is not None:
        shown = commit.files if full else commit.files[:PREVIEW_FILES]
        commit = commit.model_copy(
            update=dict(
                diff=cut(commit.diff, more if not full else "the whole diff: git diff BASE_SHA SHA in the repository"),
                files=shown,
                files_omitted=len(commit.files) - len(shown),
            )
        )
    return task.model_copy(
        update=dict(
            output=output,
            commit=commit,
            artifacts=[a.model_copy(update=dict(content=cut(a.content, more))) for a in task.artifacts],
            acceptance_tests=task.acceptance_tests
            and task.acceptance_tests.model_copy(
                update=dict(
                    files=[f.model_copy(update=dict(content=cut(f.content, more))) for f in task.acceptance_tests.files]
                )
            ),
        )
    )


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity, memory, wants_review = deps.board, deps.identity, deps.memory, deps.wants_review
    worktrees = deps.worktrees

    @mcp.tool(annotations=IDEMPOTENT)
    @tool_boundary
    def whoami(
        ctx: Context,
        name: Annotated[str | None, Field(max_length=64)] = None,  # the description says: once
        role: Annotated[str | None, Field(description="e.g. coder, reviewer, lead", max_length=40)] = None,
        token: Annotated[str | None, Field(max_length=200)] = None,
    ) -> WhoAmI:
        """Who this connection acts as; name= sets it once."""
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
        title: Annotated[str, Field(min_length=1, max_length=200)],
        description: str = "",  # what and why
        task_type: Annotated[str, Field(description="e.g. code, docs, bug", max_length=40)] = "code",
        priority: Priority = "medium",
        labels: list[str] = [],
        depends_on: Annotated[list[Id], Field(description="ids done first")] = [],
        acceptance_criteria: list[str] = [],  # checkable; '$ command' lines run in review
        assignee: Annotated[str | None, Field(description="reserve it for this agent")] = None,
        acceptance_tests: AcceptanceTests | None = None,  # what review does with them: the server instructions
        waive: Annotated[list[str], Field(max_length=20)] = [],
        attempts: Annotated[int, Field(ge=1, le=5)] = 1,
        needs_approval: bool = False,  # a person approves it after its review passes, whatever its labels become
        budget_tokens: Annotated[
            int | None, Field(ge=1, le=MAX_ID)
        ] = None,  # tokens its agents may spend (hook-recorded) before you are told
        paths: Annotated[list[str], Field(description="globs it will touch", max_length=50)] = [],
        repo: Annotated[str | None, Field(description="a registered git repo's name", max_length=40)] = None,
        canary: bool = False,  # people only: hidden tests contradict the criteria (docs/reference.md)
    ) -> TaskSummary:
        """Add a card to todo."""
        actor = identity.require(ctx)
        if attempts > 1 and wants_review is None:
            raise ToolError(
                "competing attempts are compared through their reviews, and review is off on this "
                "server; create one card (attempts=1)"
            )
        return board.create(
            actor,
            NewTask(
                title=title,
                description=description,
                task_type=task_type,
                priority=priority,
                labels=labels,
                depends_on=depends_on,
                acceptance_criteria=acceptance_criteria,
                assignee=assignee,
                waive=waive,
                attempts=attempts,
                needs_approval=needs_approval,
                acceptance_tests=acceptance_tests,
                budget_tokens=budget_tokens,
                paths=paths,
                repo=repo,
                canary=canary,
            ),
        )

    @mcp.tool(annotations=READ, meta=UI)
    @tool_boundary
    def get_task(
        ctx: Context,
        task_id: TaskId,
        full: bool = False,
        history: Annotated[int, Field(ge=0, le=100)] = 20,
        artifact: Annotated[str | None, Field(max_length=300)] = None,
    ) -> Task:
        """One card: fields, output, artifacts, history."""
        return _trim(board.get(task_id, history=history, viewer=identity.current(ctx)), full, artifact)

    @mcp.tool(annotations=READ)
    @tool_boundary
    def list_tasks(
        status: Status | None = None,
        task_type: Annotated[str | None, Field(max_length=40)] = None,
        assignee: Annotated[str | None, Field(max_length=64)] = None,
        label: Annotated[str | None, Field(max_length=50)] = None,
        ready: Annotated[bool | None, Field(description="dependencies done")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        cursor: str | None = None,  # a page's hint says which
    ) -> ListPage:
        """Cards by filter, highest priority first, paged."""
        page = board.list(
            status=status, task_type=task_type, assignee=assignee, label=label, ready=ready, limit=limit, cursor=cursor
        )
        hint = None
        if page.next_cursor:
            hint = (
                f"{page.total - len(page.tasks)} more may follow; call list_tasks with the same filters "
                f"and cursor={page.next_cursor!r}"
            )
        return ListPage(**page.model_dump(), hint=hint)

    @mcp.tool(annotations=READ, meta=UI)
    @tool_boundary
    def get_board(top: Annotated[int, Field(ge=0, le=50)] = 3) -> BoardView:
        """Column counts, top cards, and how many are ready."""
        return board.board(top=top)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    async def claim_task(
        ctx: Context,
        task_id: Annotated[int | None, Field(description="omit: the next ready card", ge=1, le=MAX_ID)] = None,
        task_type: Annotated[str | None, Field(description="with no task_id: only this type", max_length=40)] = None,
        worktree: Annotated[bool, Field(description="also a git worktree of its repo")] = False,
    ) -> ClaimAnswer:
        """Take a card atomically: a lease, a fencing token, past lessons."""
        held_before = False

        def take() -> tuple[str, Claim, Digest | None, list[Hit] | None]:
            nonlocal held_before
            agent = identity.require(ctx)
            if worktree:
                try:  # what no card changes is refused before anything is written
                    worktrees.check(agent)
                except GitError as exc:
                    raise ToolError(f"no worktree can be made: {exc}; nothing was claimed") from None
            if worktree and task_id is not None:  # a claim again by its holder is not undone if the worktree fails
                card = board.summary(task_id)
                held_before = card.status == "in_progress" and card.assignee == agent
            # lessons computed ahead (or none to hand) are read with the claim on SQLite (their record of being
            # handed out is written with it), else after it; searching them waits for the lane's end
            embedded = memory is not None and board.store.dialect.embedded

            def ahead(db: Database | None, task: Task) -> list[Hit] | None:
                try:
                    return memory.lessons_ahead(agent, task, db)
                except Exception:  # the claim stands: they are searched below, which never fails the call
                    log.exception("lessons computed ahead for task %s could not be read", task.id)
                    return None

            claim, digest, lessons = board.take(
                agent, task_id=task_id, task_type=task_type, in_repo=worktree, then=ahead if embedded else None
            )
            if not claim.claimed:
                return agent, claim, None, []
            if memory is None:
                return agent, claim, digest, []
            return agent, claim, digest, lessons if embedded else ahead(None, claim.task)

        # a worktree's check runs git: on a worker thread
        agent, claim, digest, lessons = await lanes.run("write", take, board_only=not worktree)
        given = None
        if worktree and claim.claimed:
            given = await _worktree(agent, claim, held_before)
            claim = claim.model_copy(update={"message": f"{claim.message}; {given.note}"})
        if lessons is None:
            try:  # embeds the card's text and searches: off the board's lanes
                lessons = await lanes.off_loop(memory.context_for, agent, claim.task)
            except Exception:  # the claim has committed: its holder must still learn its token
                log.exception("lessons for task %s could not be read", claim.task.id)
                lessons = []
                claim = claim.model_copy(
                    update={"message": claim.message + "; past lessons could not be read just now (query_memory later)"}
                )
        return ClaimAnswer(
            **dict(claim),
            worktree=given and given.path,
            branch=given and given.branch,
            copied=given.copied if given else [],
            digest=digest,
            lessons=lessons,
        )

    async def _worktree(agent: str, claim: Claim, held_before: bool) -> Given:
        """The claimed card's worktree, made off the board's lanes (git may take a while); a claim this call made
        is released again when it cannot be made."""
        task = claim.task
        try:
            return await lanes.off_loop(worktrees.give, agent, task.id, task.repo)
        except WORKTREE_PROBLEMS as exc:
            problem = why(exc)
            log.warning("task %s: no worktree for %s: %s", task.id, agent, problem)
        if held_before:
            raise ToolError(
                f"task {task.id}'s worktree could not be made: {problem}; your claim stands (claim_task without "
                "worktree=true hands its token back)"
            )
        try:
            await lanes.run("write", board.release, agent, task.id, claim.token, f"no worktree: {problem}"[:500])
        except BoardError:  # the lease ran out or someone moved it meanwhile: it is not ours either way
            log.exception("task %s: could not release the claim whose worktree failed", task.id)
        raise ToolError(f"task {task.id}'s worktree could not be made: {problem}; nothing was claimed")

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def release_task(
        ctx: Context,
        task_id: TaskId,
        token: Token,
        reason: str | None = None,
    ) -> TaskSummary:
        """Give a card you hold back to todo."""
        return board.release(identity.require(ctx), task_id, token, reason)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def flag_task(
        ctx: Context,
        task_id: TaskId,
        token: Token,
        reason: Annotated[str, Field(min_length=1, max_length=2000)],
        kind: FlagKind,
    ) -> TaskSummary:
        """Can't be done as written? A person decides; no round used."""
        return board.flags.flag(identity.require(ctx), task_id, token, kind, reason)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def update_task(
        ctx: Context,
        task_id: TaskId,
        token: Annotated[int | None, Field(ge=0, le=MAX_ID)] = None,
        note: str | None = None,
        # what each status needs is in the server instructions
        status: Literal["blocked", "in_progress", "todo", "needs_human"] | None = None,
        reason: str | None = None,
        title: Annotated[str | None, Field(max_length=200)] = None,
        description: str | None = None,
        priority: Priority | None = None,
        labels: list[str] | None = None,
        acceptance_criteria: list[str] | None = None,
        needs_approval: bool | None = None,  # false clears it (docs/reference.md: who may change what)
        expected_version: Annotated[
            int | None, Field(description="refuse if past this version", ge=1, le=MAX_ID)
        ] = None,
        rounds: Annotated[int | None, Field(ge=1, le=20)] = None,  # more review rounds: its creator or a person
    ) -> TaskSummary:
        """Note progress, renew your lease (token alone), change status, edit your card."""
        edit = TaskEdit(
            title=title,
            description=description,
            priority=priority,
            labels=labels,
            acceptance_criteria=acceptance_criteria,
            needs_approval=needs_approval,
        )
        return board.update(
            identity.require(ctx),
            task_id,
            token=token,
            note=note,
            status=status,
            reason=reason,
            edit=edit,
            expected_version=expected_version,
            grant_rounds=rounds,
        )

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    async def complete_task(
        ctx: Context,
        task_id: TaskId,
        token: Token,
        output: str,
        summary: Annotated[str | None, Field(max_length=2000)] = None,
        artifacts: list[Artifact] = [],
        helpful_lessons: Annotated[
            list[Id], Field(max_length=50, description="ids of handed lessons that helped")
        ] = [],
        ref: Annotated[str | None, Field(description="commit or branch instead of artifacts", max_length=200)] = None,
    ) -> TaskSummary:
        """Hand in a card you hold: to review (get_review) or done."""

        def to_status(card: TaskSummary) -> str:  # without a review, a card that needs a person waits for one
            if wants_review is not None and wants_review(card):
                return "review"
            return "needs_human" if card.needs_approval else "done"

        def complete(actor: str, commit: Commit | None = None) -> TaskSummary:
            return board.complete(
                actor, task_id, token, output, summary, artifacts, to_status, helpful=helpful_lessons, commit=commit
            )

        if ref is None:
            return await lanes.run("write", lambda: complete(identity.require(ctx)))
        if artifacts:
            raise ToolError(BOTH)

        def target() -> tuple[str, Target]:
            actor = identity.require(ctx)
            where = board.commits.target(actor, task_id, token)
            if to_status(board.summary(task_id)) != "review":  # before git runs; the board checks again
                raise ToolError(
                    f"task {task_id} would not be reviewed on this server (review is off), and a commit is only "
                    "handed in to be reviewed and merged; hand in with artifacts= instead"
                )
            return actor, where

        actor, where = await lanes.run("write", target)
        try:  # git in the sandbox, off the board's lanes: the commit checked, described and pinned
            commit = await lanes.off_loop(lambda: deps.repository(where.repo.name).hand_in(where, ref))
        except GitError as exc:
            raise ToolError(f"{exc}; nothing was handed in") from exc
        return await lanes.run("write", complete, actor, commit)
