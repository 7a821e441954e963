"""Tools over the shared memory: search it, fill it (notes, snippets, documents), teach it a lesson.
Registered only when memory is on.

Notes and lessons are two tools on purpose: a lesson (problem + fix) is merged into a near-duplicate
lesson and handed out at claims, while a remembered note is stored as given and never merged, so a
model that only wants something kept does not see it vanish into a lesson it did not mean to touch.
"""

from __future__ import annotations

import functools
import time
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field, field_validator

from hiveboard.board.db import now
from hiveboard.board.events import Topic
from hiveboard.board.knowledge import MAX_TAGS, MemoryKind, NewItem, NoteKind
from hiveboard.board.recall import Trust
from hiveboard.memory.service import Mode, Recorded, Results

from . import lanes
from .boundary import CREATE, MAX_ID, READ, tool_boundary
from .deps import Deps

MAX_NOTES = 50  # items per remember call
NOTE_CHARS = 20_000  # one remembered item (the model reads only its start for meaning; keywords see all)
MAX_WAIT = 60  # seconds a search may wait for the vector index to catch up
Tag = Annotated[str, Field(min_length=1, max_length=50)]


def stored_item(*, text: str, title: str | None, task_type: str | None, tags: list[str], **more) -> NewItem:
    """What is stored for an item sent to `remember` or read from a memory file: with no title, its first line;
    the task type lowercased; each tag once."""
    return NewItem(
        text=text,
        title=text.strip().splitlines()[0][:120] if title is None else title,
        task_type=task_type.strip().lower() if task_type else None,
        tags=list(dict.fromkeys(tags)),
        **more,
    )


class Note(BaseModel):
    """One item to remember (the edge's bounds; `hiveboard memory import` checks each line with them too)."""

    text: str = Field(min_length=1, max_length=NOTE_CHARS)
    kind: NoteKind = "note"
    title: str | None = Field(None, max_length=200)
    task_type: str | None = Field(None, max_length=40)
    tags: list[Tag] = Field([], max_length=MAX_TAGS)
    task_id: int | None = Field(None, ge=1, le=MAX_ID)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank; send what to remember")
        return text

    def new_item(self) -> NewItem:
        return stored_item(
            text=self.text,
            title=self.title or None,
            task_type=self.task_type,
            tags=self.tags,
            kind=self.kind,
            task_id=self.task_id,
        )


class Remembered(BaseModel):
    ids: list[int] = Field(description="the new items' ids, in the order sent")
    queued: int = Field(description="items waiting for the vector index; keyword search sees them at once")


def register(mcp: MCPServer, deps: Deps) -> None:
    memory, identity, board = deps.memory, deps.identity, deps.board
    if memory is None:
        return
    notifier = board.store.notifier

    @mcp.tool(annotations=READ)
    @tool_boundary
    async def query_memory(
        query: Annotated[str, Field(min_length=1, max_length=2000)],
        task_type: Annotated[str | None, Field(max_length=40)] = None,
        kinds: list[MemoryKind] | None = None,
        tags: Annotated[list[Tag] | None, Field(description="items with all these", max_length=MAX_TAGS)] = None,
        k: Annotated[int, Field(ge=1, le=50)] = 5,
        include_deprecated: bool = False,
        mode: Mode = "hybrid",
        wait_seconds: Annotated[float, Field(description="for unindexed items", ge=0, le=MAX_WAIT)] = 0,
        trust: Trust | None = None,
    ) -> Results:
        """Search team memory by meaning and keyword."""
        if wait_seconds and mode != "keyword":
            await _indexed(now(), time.monotonic() + wait_seconds)
        return await lanes.off_loop(
            functools.partial(
                memory.query,
                query,
                task_type=task_type,
                kinds=kinds,
                tags=tags,
                k=k,
                include_deprecated=include_deprecated,
                mode=mode,
                trust=[trust] if trust else None,
            )
        )

    async def _indexed(queued_by: float, deadline: float) -> None:
        """Return once the items queued by `queued_by` are indexed (the indexer's commits wake us, also
        from the process that owns the index), or at the deadline."""
        while True:
            mark = notifier.mark(Topic.MEMORY_INDEXED)  # before the count, so a batch indexed in between wakes us
            waiting = await lanes.off_loop(memory.pending, queued_by)  # may open the memory: off the lanes
            remaining = deadline - time.monotonic()
            if not waiting or remaining <= 0:
                return
            async with lanes.stepped_aside():
                await notifier.wait(Topic.MEMORY_INDEXED, mark, remaining)

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def remember(
        ctx: Context,
        items: Annotated[list[Note], Field(min_length=1, max_length=MAX_NOTES)],
    ) -> Remembered:
        """Keep notes, snippets or documents for the team (never merged)."""
        stored = board.knowledge.remember(identity.require(ctx), [item.new_item() for item in items])
        return Remembered(ids=[item.id for item in stored], queued=board.knowledge.pending())

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    async def record_lesson(
        ctx: Context,
        problem: Annotated[str, Field(description="what went wrong (or could)", min_length=1, max_length=4000)],
        fix: Annotated[str, Field(description="what to do instead", min_length=1, max_length=4000)],
        task_type: Annotated[str, Field(max_length=40)],
        title: Annotated[str | None, Field(max_length=200)] = None,
        tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = [],
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        supersedes: Annotated[int | None, Field(description="an older lesson it replaces", ge=1, le=MAX_ID)] = None,
    ) -> Recorded:
        """Teach the team a lesson for this type of task (duplicates merge)."""
        agent = await lanes.run("write", identity.require, ctx)
        # embeds the lesson to find near-duplicates: off the board's lanes
        return await lanes.off_loop(
            functools.partial(
                memory.record_lesson,
                agent,
                problem=problem,
                fix=fix,
                task_type=task_type,
                title=title,
                tags=tags,
                task_id=task_id,
                supersedes=supersedes,
            )
        )
