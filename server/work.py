"""wait_for_work: an idle agent is told about work instead of polling for it.

It answers as soon as the agent has something to do — a card it may claim (ready, in todo, not reserved for
another; of the types and labels asked for) or unread mail in its inbox (a direct message, a verdict on its card)
— and otherwise waits for a change of the board or of its inbox, up to `wait_seconds` (cut to what the client
waits for an answer, with progress to a client that asked: server/waits.py). Nothing is claimed and
nothing is marked read: the answer says what to call next. A client that declares the MCP Tasks extension gets
the wait as a task (server/task_ext.py): the call returns at once and the answer arrives when the work does.
"""

from __future__ import annotations

import time
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from hiveboard.board import TaskSummary, now
from hiveboard.board.events import Topic
from hiveboard.board.messages import Message, MessagePage

from . import lanes, waits
from .boundary import READ, tool_boundary
from .deps import Deps

MAX_WAIT = 3600.0  # an hour: longer waits are a new call (or, as a task, a new task)
PREVIEWS = 5  # the unread messages an answer shows; get_messages has them all


class WorkAnswer(BaseModel):
    task: TaskSummary | None = Field(None, description="a card you may claim now")
    unread: int = Field(0, description="your unread messages")
    messages: list[Message] = Field(default_factory=list, description="the oldest unread ones, previewed")
    hint: str


def register(mcp, deps: Deps) -> None:
    board, identity = deps.board, deps.identity
    notifier = board.store.notifier

    @mcp.tool(annotations=READ)
    @tool_boundary
    async def wait_for_work(
        ctx: Context,
        types: Annotated[list[Annotated[str, Field(max_length=40)]], Field(max_length=20)] = [],
        labels: Annotated[list[Annotated[str, Field(max_length=50)]], Field(max_length=20)] = [],
        wait_seconds: Annotated[float, Field(ge=0, le=MAX_WAIT)] = waits.DEFAULT_WAIT,
    ) -> WorkAnswer:
        """Wait for a card to claim or mail for you (an MCP task where supported)."""
        deadline = time.monotonic() + waits.bounded(ctx, wait_seconds)

        def look(agent: str) -> tuple[dict[str, int], TaskSummary | None, MessagePage]:
            # the marks first: a change between them and the reads still wakes the wait
            marks = {topic: notifier.mark(topic) for topic in (Topic.BOARD, Topic.inbox(agent))}
            card = board.next_ready(agent, types, labels)
            page = board.messages.inbox(agent, unread_only=True, mark_read=False, limit=PREVIEWS)
            return marks, card, page

        agent = await lanes.run("read", identity.require, ctx)
        waiting = False
        try:
            while True:
                marks, card, page = await lanes.run("read", look, agent)
                remaining = deadline - time.monotonic()
                if card is not None or page.messages or remaining <= 0:
                    return _answer(card, page)
                if not waiting:  # a waiting agent counts as present (reviews ask present critics)
                    waiting = True
                    await lanes.run("write", board.agents.seen, agent, now() + remaining)
                async with lanes.stepped_aside():
                    await waits.wait(ctx, notifier, marks, remaining)
        finally:
            if waiting:
                with anyio.CancelScope(shield=True):
                    await lanes.run("write", board.agents.seen, agent, now())


def _answer(card: TaskSummary | None, page: MessagePage) -> WorkAnswer:
    says = []
    if card is not None:
        says.append(f"claim it with claim_task(task_id={card.id})")
    if page.messages:
        says.append("read your mail with get_messages (it marks it read)")
    return WorkAnswer(
        task=card,
        unread=page.unread,
        messages=page.messages,
        hint="; ".join(says) if says else "nothing yet; call wait_for_work again",
    )
