"""Tools over messages: publish, read an inbox or the pool (optionally waiting), subscribe."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from hiveboard.board.db import now
from hiveboard.board.events import Topic
from hiveboard.board.messages import Message, MessagePage, MessagePriority, NewMessage, Subscription, SubscriptionKind

from . import lanes, waits
from .boundary import CREATE, IDEMPOTENT, MAX_ID, Id, tool_boundary
from .deps import Deps


class Subscriptions(BaseModel):
    subscriptions: list[Subscription]


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity = deps.board, deps.identity
    notifier = board.store.notifier

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def publish_message(
        ctx: Context,
        intent: Annotated[str, Field(max_length=40)],
        content: str = "",
        summary: str | None = None,  # defaults to the first line (the server instructions)
        recipient: Annotated[
            str | None, Field(description="agent, 'role:<role>' or 'everyone'; omit: the pool")
        ] = None,
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        thread: Annotated[str | None, Field(description="channel name")] = None,
        reply_to: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        priority: MessagePriority = "normal",
        metadata: dict = {},
    ) -> Message:
        """Send a message to an agent, a role, everyone or the pool."""
        return board.messages.publish(
            identity.require(ctx),
            NewMessage(
                intent=intent,
                content=content,
                summary=summary,
                recipient=recipient,
                task_id=task_id,
                thread=thread,
                reply_to=reply_to,
                priority=priority,
                metadata=metadata,
            ),
        )

    @mcp.tool(annotations=CREATE)  # not read-only: reading the inbox marks messages read
    @tool_boundary
    async def get_messages(
        ctx: Context,
        box: Annotated[Literal["inbox", "pool"], Field(description="inbox: yours; pool: everyone's")] = "inbox",
        unread_only: bool = True,  # marks what it returns read: said in the server instructions
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        intent: Annotated[str | None, Field(max_length=40)] = None,
        thread: Annotated[str | None, Field(max_length=80)] = None,
        sender: Annotated[str | None, Field(max_length=64)] = None,
        since: Annotated[str | None, Field(description="ISO 8601 time")] = None,
        full: Annotated[bool, Field(description="not 280-character previews")] = False,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: str | None = None,
        wait_seconds: Annotated[float, Field(ge=0, le=300)] = 0,
        ack: Annotated[list[Id], Field(max_length=500)] = [],
    ) -> MessagePage:
        """Read your inbox or the pool, ack handled messages, or wait for one."""
        filters = dict(
            task_id=task_id,
            intent=intent,
            thread=thread,
            sender=sender,
            since=since,
            full=full,
            limit=limit,
            cursor=cursor,
        )

        def first_read() -> tuple[str | None, int | None, int, MessagePage]:
            # one trip to a worker thread for who is asking, the acks and the first page: each trip waits
            # for the GIL behind the event loop, which is busiest exactly when many agents call at once
            agent = identity.require(ctx) if (box == "inbox" or ack) else None
            board.messages.check_query(since, cursor)  # a bad query writes nothing, acks included
            acked = board.messages.ack(agent, ack) if ack else None
            if box == "pool":
                return agent, acked, 0, board.messages.pool(**filters)
            mark = notifier.mark(Topic.inbox(agent))  # before the check, so a publish in between still wakes us
            return agent, acked, mark, board.messages.inbox(agent, unread_only=unread_only, **filters)

        def nothing_unread() -> tuple[str | None, int | None, int, MessagePage] | None:
            # an inbox with nothing unread is answered from a read: a poll of an empty inbox (the commonest
            # call of a waiting agent) takes neither the write lane nor the board's write lock
            agent = identity.require(ctx)
            board.messages.check_query(since, cursor)
            mark = notifier.mark(Topic.inbox(agent))  # before the check, so a publish in between still wakes us
            return None if board.messages.has_unread(agent) else (agent, None, mark, MessagePage(messages=[], unread=0))

        # a read marks what it returns read, unless it browses (or reads the pool)
        lane = "write" if ack or (box == "inbox" and unread_only) else "read"
        deadline = time.monotonic() + waits.bounded(ctx, wait_seconds)
        found = await lanes.run("read", nothing_unread) if lane == "write" and not ack else None
        agent, acked, mark, page = found or await lanes.run(lane, first_read)
        if box == "pool":
            return page.model_copy(update={"acked": acked})
        waiting = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if page.messages or remaining <= 0:
                    return page.model_copy(update={"acked": acked})
                if not waiting:  # a waiting agent is present (reviews ask present critics only)
                    waiting = True
                    await lanes.run("write", board.agents.seen, agent, now() + remaining)
                async with lanes.stepped_aside():
                    await waits.wait(ctx, notifier, {Topic.inbox(agent): mark}, remaining)
                mark = notifier.mark(Topic.inbox(agent))
                page = await lanes.run(lane, board.messages.inbox, agent, unread_only=unread_only, **filters)
        finally:
            if waiting:
                with anyio.CancelScope(shield=True):
                    await lanes.run("write", board.agents.seen, agent, now())

    @mcp.tool(annotations=IDEMPOTENT)
    @tool_boundary
    def subscribe(
        ctx: Context,
        kind: SubscriptionKind,
        value: Annotated[str, Field(description="intent, task id or channel", min_length=1, max_length=80)],
        unsubscribe: bool = False,
    ) -> Subscriptions:
        """Follow (or unfollow) an intent, task or channel into your inbox."""
        agent = identity.require(ctx)
        return Subscriptions(subscriptions=board.messages.subscribe(agent, kind, value, on=not unsubscribe))
