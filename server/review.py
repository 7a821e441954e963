"""Tools over reviews: follow a card's review, answer a review request as an agent critic, the metrics."""

from __future__ import annotations

import time
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from hiveboard.board.events import Topic
from hiveboard.board.review_models import (
    BoardStats,
    Critique,
    CritiqueRecord,
    Finding,
    Resolution,
    ReviewIssue,
    ReviewTrail,
    Verdict,
)
from hiveboard.board.reviews import Reviews

from . import lanes, waits
from .boundary import CREATE, MAX_ID, READ, tool_boundary
from .deps import Deps


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity = deps.board, deps.identity
    notifier = board.store.notifier

    @mcp.tool(annotations=READ)
    @tool_boundary
    async def get_review(
        ctx: Context,
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        review_id: Annotated[int | None, Field(description="or a review id (review.request)", ge=1, le=MAX_ID)] = None,
        wait_seconds: Annotated[float, Field(ge=0, le=600)] = 0,
        full: bool = False,
    ) -> ReviewTrail:
        """A card's review: verdict, score, issues, brief (full=true: all rounds)."""
        if (task_id is None) == (review_id is None):
            raise ToolError("pass task_id or review_id (one of them)")
        if task_id is None:
            task_id = await lanes.run("read", board.reviews.review_of, review_id)
        topic = Topic.review(task_id)
        deadline = time.monotonic() + waits.bounded(ctx, wait_seconds)
        reported = None
        # what the card's hidden tests shaped is its creator's and people's; the author and others see it sealed
        reveals = await lanes.run("read", board.reviews.reveals, identity.current(ctx), task_id)
        while True:
            mark = notifier.mark(topic)  # before the read, so a verdict in between still wakes us
            trail = await lanes.run("read", board.reviews.trail, task_id)
            trail = trail if reveals else board.reviews.sealed(trail)
            remaining = deadline - time.monotonic()
            if not trail.rounds or trail.rounds[-1].status in ("finished", "cancelled") or remaining <= 0:
                return board.reviews.referenced(trail) if full else _plain(board.reviews, trail)
            latest = trail.rounds[-1]
            done = sum(c.status not in ("running", "pending") for c in latest.critiques)
            if (done, len(latest.critiques)) != reported:
                reported = (done, len(latest.critiques))
                await ctx.report_progress(
                    done,
                    len(latest.critiques) or None,
                    f"round {latest.round}: {done} of {len(latest.critiques)} critics done",
                )
            async with lanes.stepped_aside():
                await notifier.wait(topic, mark, remaining)

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def submit_critique(
        ctx: Context,
        review_id: Annotated[int, Field(ge=1, le=MAX_ID)],
        lens: Annotated[str, Field(description="an open lens of that review", max_length=40)],
        verdict: Verdict,
        score: Annotated[int, Field(ge=1, le=10)],  # the scale is in the server instructions
        summary: Annotated[str, Field(min_length=1, max_length=4000)],
        issues: Annotated[list[Finding], Field(max_length=50)] = [],
        resolutions: Annotated[list[Resolution], Field(max_length=50)] = [],  # round 2+: see the instructions
    ) -> CritiqueRecord:
        """As a critic, judge one lens of others' work."""
        critique = Critique(
            verdict=verdict,
            score=score,
            summary=summary,
            resolutions=resolutions,
            issues=[ReviewIssue(**issue.model_dump()) for issue in issues],
        )
        return board.reviews.submit(identity.require(ctx), review_id, lens.strip().lower(), critique)

    @mcp.tool(annotations=READ)
    @tool_boundary
    def board_stats(ctx: Context) -> BoardStats:
        """Review and memory health: PASS rate, rounds, critics, latency, reuse."""
        # each agent's canaries name the canary cards: a person's (an operator role's), never a claimer's to read
        caller = identity.current(ctx)
        return board.stats(honesty=caller is not None and board.machine.operator(caller))


def _plain(reviews: Reviews, trail: ReviewTrail) -> ReviewTrail:
    """The compact answer; while a round is under way it shows no verdict or issue yet, so the last finished
    round comes whole beside it: the verdict the author is revising, the issues its critics follow up."""
    answer = reviews.compact(trail)
    if trail.rounds and trail.rounds[-1].status not in ("finished", "cancelled"):
        before = next((r for r in reversed(trail.rounds[:-1]) if r.status == "finished"), None)
        if before is not None:
            shown = reviews.referenced(trail.model_copy(update={"rounds": [before]})).rounds
            answer = answer.model_copy(
                update={"rounds": [*shown, *answer.rounds], "rounds_omitted": answer.rounds_omitted - 1}
            )
    return answer
