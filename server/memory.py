"""Tools over the shared memory: search it, teach it a lesson. Registered only when memory is on."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from hiveboard.memory.service import Recorded, Results

from .boundary import CREATE, MAX_ID, READ, tool_boundary
from .deps import Deps

MAX_TAGS = 20  # tags of a memory item, or asked for in a search
Tag = Annotated[str, Field(min_length=1, max_length=50)]


def register(mcp: MCPServer, deps: Deps) -> None:
    memory, identity = deps.memory, deps.identity
    if memory is None:
        return

    @mcp.tool(annotations=READ)
    @tool_boundary
    def query_memory(
        query: Annotated[str, Field(min_length=1, max_length=2000)],
        task_type: Annotated[str | None, Field(max_length=40)] = None,
        kinds: list[Literal["lesson", "critique", "output", "message", "note"]] | None = None,
        tags: Annotated[list[Tag] | None, Field(description="items with all these", max_length=MAX_TAGS)] = None,
        k: Annotated[int, Field(ge=1, le=20)] = 5,
        include_deprecated: Annotated[bool, Field(description="also superseded items")] = False,
        mode: Annotated[Literal["hybrid", "vector", "keyword"], Field(description="hybrid is best")] = "hybrid",
    ) -> Results:
        """Search team memory: lessons, critiques, outputs, messages."""
        return memory.query(query, task_type=task_type, kinds=kinds, tags=tags, k=k,
                            include_deprecated=include_deprecated, mode=mode)

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def record_lesson(
        ctx: Context,
        problem: Annotated[str, Field(description="what went wrong (or could)", min_length=1, max_length=4000)],
        fix: Annotated[str, Field(description="what to do instead", min_length=1, max_length=4000)],
        task_type: Annotated[str, Field(max_length=40)],
        title: Annotated[str | None, Field(max_length=200)] = None,
        tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = [],
        task_id: Annotated[int | None, Field(ge=1, le=MAX_ID)] = None,
        supersedes: Annotated[int | None, Field(description="an older lesson it replaces", ge=1,
                                                le=MAX_ID)] = None,
    ) -> Recorded:
        """Teach the team a lesson for this type of task (duplicates merge)."""
        return memory.record_lesson(identity.require(ctx), problem=problem, fix=fix, task_type=task_type,
                                    title=title, tags=tags, task_id=task_id, supersedes=supersedes)
