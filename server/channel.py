"""The stdio server as a Claude Code channel: what the agent must act on, pushed into its running session.

Claude Code (2.1.80+, launched with `--dangerously-load-development-channels server:hiveboard`) shows a
`notifications/claude/channel` notification of a server that declared the experimental capability `claude/channel`
to the model as a `<channel>` event, even while the session is idle: no hook, no tool call, no wait needed. Its
params are `content` (the event's text) and `meta` (string attributes of the tag; Claude Code drops keys that are
not identifiers, so ours are letters and underscores).

What is pushed is what board/pushes.py names: a direct message, a verdict on the agent's card (a review's or a
person's decision), a card reserved for it that is ready. Each once per agent across reconnects (the board records
it before it is sent), at most one every GAP seconds: a burst beyond BURST items is summed up in one push. The text
says it comes from the board and quotes what others wrote as their words (held back for a person when it reads
like an instruction), with the sender and the card in `meta`: the sender gating the channel docs ask of a channel,
for a board whose senders are agents. Memory is never pushed.

Events come from the board's one notifier (typed events, in this process and from others through its watcher); the
channel starts on the connection's `notifications/initialized`, for a client that is Claude Code (its clientInfo
name) or that declared `claude/channel` itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from hiveboard.board.events import Event, InboxChanged, TaskChanged
from hiveboard.board.pushes import Push
from hiveboard.board.recall import held_reason
from hiveboard.board.tasks import Board

from . import lanes
from .compat import connection_of
from .hook import mail_line
from .identity import Identity, client_of

log = logging.getLogger("hiveboard")

CAPABILITY = "claude/channel"
METHOD = "notifications/claude/channel"
CLIENTS = ("claude-code",)  # clientInfo names of clients that read channel notifications
GAP = 1.0  # seconds between two pushes
BURST = 3  # items pushed one by one; more waiting at once go out as one push that lists them
LISTED = 8  # items such a push names at most


def content(push: Push) -> str:
    """A push's text: framed as the board's, with the sender's words quoted as theirs."""
    if push.kind == "ready":
        title = push.title or ""
        named = "" if held_reason(title) is not None else f" «{title}»"  # its creator's words: held as mail is
        said = f"card #{push.task_id}{named} is reserved for you and ready: claim_task(task_id={push.task_id})"
    else:
        said = mail_line(
            {"task_id": push.task_id, "intent": push.intent, "sender": push.sender, "summary": push.summary}
        )
        said += " (get_messages reads it whole)"
    return f"hiveboard (the team board) tells you: {said}"


def meta(push: Push) -> dict[str, str]:
    """A push's `meta`: identifier keys and string values, as Claude Code keeps them."""
    values = {"kind": push.kind, "sender": push.sender}
    if push.task_id is not None:
        values["card"] = str(push.task_id)
    if push.message_id is not None:
        values["message_id"] = str(push.message_id)
    return values


def notification(pushes: list[Push]) -> dict:
    """The params of the one notification telling these pushes (several: listed in one)."""
    if len(pushes) == 1:
        return {"content": content(pushes[0]), "meta": meta(pushes[0])}
    lines = [f"hiveboard (the team board): {len(pushes)} things for you at once:"]
    lines += ["- " + content(p).removeprefix("hiveboard (the team board) tells you: ") for p in pushes[:LISTED]]
    if len(pushes) > LISTED:
        lines.append(f"- and {len(pushes) - LISTED} more: get_messages and get_board have them")
    cards = sorted({str(p.task_id) for p in pushes if p.task_id is not None})
    return {
        "content": "\n".join(lines),
        "meta": {"kind": "several", "count": str(len(pushes)), **({"cards": " ".join(cards)} if cards else {})},
    }


class Channel:
    """One stdio connection's channel: hears the board's events, pushes its agent's items."""

    def __init__(self, board: Board, identity: Identity, gap: float = GAP):
        self.board, self.identity, self.gap = board, identity, gap
        self._connection = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[list[Event]] | None = None
        self._waiting: deque[Push] = deque()
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []

    def middleware(self):
        """Server middleware that starts the channel once the client has said it is initialized."""

        async def middleware(ctx, call_next):
            result = await call_next(ctx)
            if self._connection is None and ctx.method == "notifications/initialized":
                name, experimental = client_of(ctx.session)
                if name in CLIENTS or CAPABILITY in experimental:
                    self.start(connection_of(ctx.session))
            return result

        return middleware

    def start(self, connection) -> None:
        self._connection = connection
        self._loop = asyncio.get_running_loop()
        self._events, self._wake = asyncio.Queue(), asyncio.Event()
        self.board.store.notifier.subscribe(self._heard)
        self._tasks = [self._loop.create_task(self._read()), self._loop.create_task(self._send())]

    def _heard(self, events: list[Event]) -> None:
        """Notifier callback (any thread): hand the events to the loop."""
        if any(isinstance(e, (InboxChanged, TaskChanged)) for e in events):
            try:
                self._loop.call_soon_threadsafe(self._events.put_nowait, events)
            except RuntimeError:  # the loop has closed: the session is over
                self.board.store.notifier.unsubscribe(self._heard)

    def _agent(self) -> str | None:
        try:
            return self.identity.current(None)
        except Exception as exc:  # its registration refused (the board's cap): nobody to push to yet
            log.warning("channel: no agent for this session yet (%s)", exc)
            return None

    async def _read(self) -> None:
        agent = await lanes.run("read", self._agent)
        if agent is not None:  # what came while the session was away, before what comes now
            self._queue(await lanes.run("read", self.board.pushes.waiting, agent))
        while True:
            events = await self._events.get()
            agent = await lanes.run("read", self._agent)
            if agent is None:
                continue
            found: list[Push | None] = []
            for event in events:
                if isinstance(event, InboxChanged) and agent in event.agents:
                    found.append(await lanes.run("read", self.board.pushes.message, agent, event.message_id))
                elif isinstance(event, TaskChanged) and event.status == "todo":
                    found.append(await lanes.run("read", self.board.pushes.ready, agent, event.task_id))
            self._queue(found)

    def _queue(self, found: list[Push | None]) -> None:
        queued = {p.key for p in self._waiting}
        for push in found:
            if push is not None and push.key not in queued:
                self._waiting.append(push)
                queued.add(push.key)
        if self._waiting:
            self._wake.set()

    async def _send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                batch = [self._waiting.popleft()] if len(self._waiting) <= BURST else self._drain()
                agent = self.identity.current(None)
                fresh = [p for p in batch if await lanes.run("write", self.board.pushes.first, agent, p.key)]
                if not fresh:
                    continue
                try:
                    await self._connection.notify(METHOD, notification(fresh))
                except Exception:  # the client went away: the session is over
                    log.warning("channel: the client no longer reads notifications", exc_info=True)
                    return
                await asyncio.sleep(self.gap)

    def _drain(self) -> list[Push]:
        batch = list(self._waiting)
        self._waiting.clear()
        return batch
