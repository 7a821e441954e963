"""Resources (the board, the metrics, a card, a memory item, an agent's inbox, digests per task type) and
subscriptions to inboxes.

An agent may read, subscribe to or listen on its own inbox only. Clients on the session protocol
(2025-11-25) subscribe with resources/subscribe; on 2026-07-28 they open subscriptions/listen (the
SDK's handler, behind the same rule).
"""

from __future__ import annotations

import asyncio
import json
import weakref

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)

from hiveboard.board.errors import BoardError
from hiveboard.board.events import Event, InboxChanged

from .compat import add_request_handler, connection_of
from .deps import Deps


def inbox_uri(agent: str) -> str:
    return f"hiveboard://inbox/{agent}"


def digest_uri(task_type: str) -> str:
    return f"hiveboard://digest/{task_type}"


class _CountingBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, also counting its open listen streams (on the event loop)."""

    def __init__(self):
        super().__init__()
        self.listening = 0

    def subscribe(self, listener):
        unsubscribe = super().subscribe(listener)
        self.listening += 1
        done = False

        def counted_unsubscribe() -> None:
            nonlocal done
            if not done:
                done = True
                self.listening -= 1
            unsubscribe()

        return counted_unsubscribe


class InboxSubscriptions:
    """Who is subscribed to which inbox, on both protocols; `changed` tells them (any thread)."""

    def __init__(self):
        self.bus = _CountingBus()
        self._connections: dict[str, weakref.WeakSet] = {}  # 2025-11-25 subscribers, until they go away
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, mcp: MCPServer, deps: Deps) -> None:
        def own_inbox(rctx, uri: str) -> None:
            me = deps.identity.current(Context(request_context=rctx, mcp_server=mcp))
            if uri != inbox_uri(me):
                raise MCPError(INVALID_PARAMS, f"you can subscribe only to your own inbox ({inbox_uri(me)})")

        async def subscribe(rctx, params: SubscribeRequestParams) -> EmptyResult:
            own_inbox(rctx, params.uri)
            self._connections.setdefault(params.uri, weakref.WeakSet()).add(connection_of(rctx.session))
            return EmptyResult()

        async def unsubscribe(rctx, params: UnsubscribeRequestParams) -> EmptyResult:
            self._connections.get(params.uri, weakref.WeakSet()).discard(connection_of(rctx.session))
            return EmptyResult()

        listen = ListenHandler(self.bus)

        async def listen_guarded(rctx, params: SubscriptionsListenRequestParams):
            for uri in params.notifications.resource_subscriptions or ():
                if uri.startswith("hiveboard://inbox/"):
                    own_inbox(rctx, uri)
            return await listen(rctx, params)

        add_request_handler(mcp, "subscriptions/listen", SubscriptionsListenRequestParams, listen_guarded)
        add_request_handler(mcp, "resources/subscribe", SubscribeRequestParams, subscribe)
        add_request_handler(mcp, "resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)

    def serve_on(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop

    def changed(self, events: list[Event]) -> None:
        """Notifier callback (any thread): tell the subscribers of inboxes that changed."""
        loop = self._loop
        if loop is None:
            return
        agents = {agent for event in events if isinstance(event, InboxChanged) for agent in event.agents}
        for agent in agents:
            uri = inbox_uri(agent)
            if self.bus.listening:  # else publishing would cost the event loop a task per inbox for nobody
                asyncio.run_coroutine_threadsafe(self.bus.publish(ResourceUpdated(uri=uri)), loop)
            for connection in list(self._connections.get(uri, ())):
                asyncio.run_coroutine_threadsafe(
                    connection.notify("notifications/resources/updated", {"uri": uri}), loop
                )


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity = deps.board, deps.identity

    @mcp.resource(
        "hiveboard://board",
        name="board",
        description="The board: columns, counts and top cards",
        mime_type="application/json",
    )
    def board_resource() -> str:
        return board.board(top=10).model_dump_json()

    @mcp.resource(
        "hiveboard://stats",
        name="stats",
        description="Review and memory metrics (board_stats)",
        mime_type="application/json",
    )
    def stats_resource() -> str:
        return board.stats().model_dump_json()

    @mcp.resource(
        "hiveboard://tasks/{task_id}",
        name="task",
        description="One card in full, with its history",
        mime_type="application/json",
    )
    def task_resource(task_id: int) -> str:
        try:
            return board.get(int(task_id)).model_dump_json()
        except BoardError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @mcp.resource(
        "hiveboard://memory/{item_id}",
        name="memory",
        mime_type="application/json",
        description="One memory item in full: its whole text, source, tags (query_memory shows a snippet)",
    )
    def memory_resource(item_id: str) -> str:
        if not item_id.isdigit():
            raise ResourceNotFoundError(f"memory item {item_id!r} is not an id; use a hit's id from query_memory")
        try:
            return board.knowledge.item(int(item_id)).model_dump_json(exclude_none=True)
        except BoardError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @mcp.resource(
        "hiveboard://digests",
        name="digests",
        mime_type="application/json",
        description="The task types that have a digest: title, rules and lessons of each",
    )
    def digests_resource() -> str:
        return json.dumps(
            [
                {
                    "task_type": d.task_type,
                    "title": d.title,
                    "rules": len(d.rules),
                    "lessons": d.lessons,
                    "uri": digest_uri(d.task_type),
                }
                for d in board.digests.all()
            ]
        )

    @mcp.resource(
        "hiveboard://digest/{task_type}",
        name="digest",
        mime_type="application/json",
        description="A task type's digest: its lessons grouped by meaning into rules with counts",
    )
    def digest_resource(task_type: str) -> str:
        task_type = task_type.strip().lower()
        digest = board.digests.get(task_type)
        if digest is None:
            had = board.digests.accrued().get(task_type, 0)
            raise ResourceNotFoundError(
                f"task type {task_type!r} has no digest yet ({had} lessons): one is written "
                "once it has enough lessons; hiveboard://digests lists those that have one"
            )
        return digest.model_dump_json()

    @mcp.resource(
        "hiveboard://inbox/{agent}",
        name="inbox",
        mime_type="application/json",
        description="An agent's unread messages (summaries); subscribe to be told when it changes",
    )
    def inbox_resource(agent: str, ctx: Context) -> str:
        me = identity.current(ctx)
        if me != agent.lower():
            raise ResourceError(f"you can read only your own inbox ({inbox_uri(me)})")
        page = board.messages.inbox(me, unread_only=True, mark_read=False, limit=20)
        return page.model_dump_json()
