"""Live updates for open pages: server-sent events pushed from the board's commit events.

The hub subscribes to the same notifier that wakes agents (board/events.py), so a change made by any
process on the data directory reaches every open page. Events are gathered for a moment and turned
into one payload per batch, rendered once and shared by every page: the changed cards as HTML and the
column counts (for the board), and which tasks, threads and reviews changed (other pages reload their
main part when it concerns them). A filtered board also gets its own column counts, counted once per
batch for each distinct filter that some page watches. Nothing polls: a page with nothing happening
costs a keep-alive comment, and a look at its person's session (ended: so is the stream), every KEEPALIVE
seconds.

A page can miss updates: those committed between its rendering and its stream's start, and those sent
while its stream was down (a dropped connection, or a page too far behind, whose stream is ended). So
each page carries the id of the newest event it was rendered after, and each stream starts by naming
the newest one now (`hello`); when they differ, static/app.js reloads the page's main part.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

from hiveboard.board.events import Event, InboxChanged, ReviewChanged, TaskChanged
from hiveboard.board.tasks import Board

from .. import lanes
from . import pages

log = logging.getLogger("hiveboard")

BATCH_SECONDS = 0.1  # gather a burst of commits into one update
MIN_GAP = 0.3  # and at most one update per MIN_GAP: a busier board makes bigger updates, not more of them
KEEPALIVE = 20.0
KEEPALIVE_LINE = b": keep-alive\n\n"
QUEUE = 64  # updates a slow page may fall behind before it is dropped (its browser reconnects and reloads)

Filter = tuple[str | None, str | None, str | None]  # a board page's (type, agent, label); all None: unfiltered
NOT_COUNTED = b"event: counts\ndata: null\n\n"  # a filter past MAX_FILTERS: the page asks /board/counts itself
MAX_FILTERS = 50  # distinct filters counted per update; pages past them are told to fetch their own


class LiveHub:
    def __init__(self, board: Board):
        self.board = board
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[asyncio.Queue, Filter] = {}
        self._tasks: set[int] = set()
        self._reviews: set[int] = set()
        self._messages: set[int] = set()
        self._rendering = asyncio.Lock()  # one batch at a time, so pages get them in order
        self._flush: asyncio.TimerHandle | None = None
        self._sent = 0.0  # loop time of the last update

    @property
    def clients(self) -> int:
        return len(self._clients)

    def _start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self.board.store.notifier.subscribe(self._events)

    def close(self) -> None:
        if self._loop is not None:
            self.board.store.notifier.unsubscribe(self._events)
            self._loop = None

    def _events(self, events: list[Event]) -> None:
        """Notifier callback, on the committing thread: hand the events to the loop, nothing more."""
        loop = self._loop
        if loop is None or not self._clients:
            return
        try:
            loop.call_soon_threadsafe(self._gather, events)
        except RuntimeError:  # the loop has closed
            pass

    def _gather(self, events: list[Event]) -> None:
        for e in events:
            if isinstance(e, TaskChanged):
                self._tasks.add(e.task_id)
            elif isinstance(e, ReviewChanged):
                self._reviews.add(e.task_id)
            elif isinstance(e, InboxChanged):
                self._messages.add(e.message_id)
        if self._flush is None and (self._tasks or self._reviews or self._messages):
            loop = asyncio.get_running_loop()
            self._flush = loop.call_at(max(loop.time() + BATCH_SECONDS, self._sent + MIN_GAP), self._send_batch)

    def _send_batch(self) -> None:
        loop = asyncio.get_running_loop()
        if self._rendering.locked():  # the last update is still rendering: this one waits, growing, not queueing
            self._flush = loop.call_later(MIN_GAP, self._send_batch)
            return
        self._flush = None
        self._sent = loop.time()
        tasks, reviews, messages = self._tasks, self._reviews, self._messages
        self._tasks, self._reviews, self._messages = set(), set(), set()
        asyncio.get_running_loop().create_task(self._broadcast(tasks, reviews, messages))

    async def _broadcast(self, tasks: set[int], reviews: set[int], messages: set[int]) -> None:
        try:
            async with self._rendering:
                # the filters watched now, inside the lock: a page that connected during the last render counts too
                filters = set(list(dict.fromkeys(f for f in self._clients.values() if any(f)))[:MAX_FILTERS])
                payload, counted = await lanes.off_loop(self._render, tasks, reviews, messages, filters)
        except Exception:  # a failed update must not end the hub; pages catch up on the next one
            log.exception("live update failed")
            return
        for queue, watched in list(self._clients.items()):
            try:
                extra = counted.get(watched, NOT_COUNTED if any(watched) and (tasks or reviews) else b"")
                queue.put_nowait(payload + extra)
            except asyncio.QueueFull:  # too far behind: end its stream; EventSource reconnects and catches up
                self._clients.pop(queue, None)
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(None)

    def _render(
        self, tasks: set[int], reviews: set[int], messages: set[int], filters: set[Filter]
    ) -> tuple[bytes, dict[Filter, bytes]]:
        """One SSE payload for every page, rendered once whoever is watching; and for each filter some board
        page watches, a `counts` event with its column counts."""
        out, counted = [], {}
        changed = tasks | reviews
        if changed:
            cards = self.board.views.cards(changed)
            found = {c.id for c in cards}
            data = {
                "cards": [{"id": c.id, "status": c.status, "html": pages.card(c)} for c in cards],
                "gone": sorted(changed - found),
                "counts": self.board.views.counts(),
            }
            out.append(f"event: cards\ndata: {json.dumps(data)}\n\n")
            for f in filters:
                counts = self.board.views.counts(task_type=f[0], agent=f[1], label=f[2])
                counted[f] = f"event: counts\ndata: {json.dumps(counts)}\n\n".encode()
        pool, threads = self.board.views.pool_tasks(messages) if messages else (False, set())
        out.append(
            "event: change\ndata: "
            + json.dumps(
                {"tasks": sorted(changed), "reviews": sorted(reviews), "pool": pool, "threads": sorted(threads)}
            )
            + "\n\n"
        )
        return "".join(out).encode(), counted

    async def stream(
        self, watched: Filter = (None, None, None), still: Callable[[], bool] | None = None
    ) -> AsyncIterator[bytes]:
        """One page's event stream, until the page goes away. A filtered board names its filter; `still` runs
        (off the loop) once every KEEPALIVE seconds or so, on a busy board as on a quiet one: the person
        watching is still there, and while it says True they may still watch (False: their session ended,
        and so does the stream).

        The first event, `hello`, names the newest commit event (`at`), read once this page is listening: a
        page rendered before it (its own `at` is older) or reconnecting after a dropped stream missed the
        updates in between, and reloads what it shows."""
        self._start()
        queue: asyncio.Queue = asyncio.Queue(QUEUE)
        self._clients[queue] = watched
        try:
            at = await lanes.off_loop(self.board.views.last_event)
            yield f"retry: 1000\nevent: hello\ndata: {json.dumps({'at': at})}\n\n".encode()
            loop = asyncio.get_running_loop()
            checked = loop.time()
            while True:
                try:
                    payload = await asyncio.wait_for(queue.get(), KEEPALIVE)
                except TimeoutError:
                    payload = KEEPALIVE_LINE
                if payload is None:
                    return
                if still is not None and (payload is KEEPALIVE_LINE or loop.time() - checked >= KEEPALIVE):
                    checked = loop.time()
                    if not await lanes.off_loop(still):
                        return
                yield payload
        finally:
            self._clients.pop(queue, None)
