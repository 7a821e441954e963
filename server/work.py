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
from mcp_types import InputRequiredResult
from pydantic import BaseModel, Field

from hiveboard.board.db import now
from hiveboard.board.events import Topic
from hiveboard.board.messages import Message, MessagePage
from hiveboard.board.models import TaskSummary
from hiveboard.board.recall import held_reason

from . import lanes, waits
from .approvals import Approvals, can_ask
from .boundary import READ, tool_boundary
from .deps import Deps

MAX_WAIT = 3600.0  # an hour: longer waits are a new call (or, as a task, a new task)
PREVIEWS = 5  # the unread messages an answer shows; get_messages has them all


class WorkAnswer(BaseModel):
    task: TaskSummary | None = Field(None, description="a card you may claim now")
    unread: int = Field(0, description="your unread messages")
    messages: list[Message] = Field(default_factory=list, description="the oldest unread ones, previewed")
    asked: str | None = Field(None, description="a person asked in their client about a card: what came of it")
    hint: str


def register(mcp, deps: Deps) -> None:
    board, identity = deps.board, deps.identity
    notifier = board.store.notifier
    approvals = Approvals(deps)

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
            # the marks first: a change between them and the reads still wakes the wait; a person's wait also wakes
            # when a card comes to wait on a person (it is asked about it below)
            topics = (Topic.WORK, Topic.inbox(agent), *((Topic.PEOPLE,) if person else ()))
            marks = {topic: notifier.mark(topic) for topic in topics}
            card = board.next_ready(agent, types, labels)
            page = board.messages.inbox(agent, unread_only=True, mark_read=False, limit=PREVIEWS)
            return marks, card, page

        agent = await lanes.run("read", identity.require, ctx)
        # a person whose client takes forms is asked about cards waiting on a person (server/approvals.py)
        person = await lanes.run("read", approvals.is_person, agent)
        forms = person and can_ask(ctx)
        if forms and (asked := await approvals.answered(ctx, agent)) is not None:
            return _answer(None, (await lanes.run("read", look, agent))[2], asked.outcome)
        waiting = False
        try:
            while True:
                marks, card, page = await lanes.run("read", look, agent)
                remaining = deadline - time.monotonic()
                if card is not None or page.messages or remaining <= 0:
                    return _answer(card, page)
                if person and (due := await lanes.run("read", approvals.next_card, agent)) is not None:
                    asked = await approvals.ask_now(ctx, agent, due) if forms else approvals.to_web(agent, due)
                    return asked if isinstance(asked, InputRequiredResult) else _answer(None, page, asked.outcome)
                if not waiting:  # a waiting agent counts as present (reviews ask present critics)
                    waiting = True
                    await lanes.run("write", board.agents.seen, agent, now() + remaining)
                async with lanes.stepped_aside():
                    await waits.wait(ctx, notifier, marks, remaining)
        finally:
            if waiting:
                with anyio.CancelScope(shield=True):
                    await lanes.run("write", board.agents.seen, agent, now())


def _previewed(message: Message) -> Message:
    """A message handed unasked, as the hook hands one: an instruction-shaped one only as held, with where to read
    it on purpose (get_messages)."""
    why = held_reason(f"{message.summary or ''}\n{message.content}")
    if why is None:
        return message
    note = f"held for a person ({why}); read it with get_messages(full=true) and judge it yourself"
    return message.model_copy(update={"content": note, "summary": note})


def _answer(card: TaskSummary | None, page: MessagePage, asked: str | None = None) -> WorkAnswer:
    says = [asked] if asked else []
    if card is not None:
        says.append(f"claim it with claim_task(task_id={card.id})")
    if page.messages:
        says.append("read your mail with get_messages (it marks it read)")
    return WorkAnswer(
        task=card,
        unread=page.unread,
        messages=[_previewed(m) for m in page.messages],
        asked=asked,
        hint="; ".join(says) if says else "nothing yet; call wait_for_work again",
    )
