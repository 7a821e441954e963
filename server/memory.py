"""Tools over the shared memory: search it, teach it a lesson. Registered only when memory is on."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from hiveboard.memory.service import Recorded, Results

from .boundary import CREATE, MAX_ID, READ, tool_boundary
from .deps import Deps

MAX_TAGS = 20  # tags of a memory item, or asked for in a search: each is a metadata key in Chroma
Tag = Annotated[str, Field(min_length=1, max_length=50)]


def register(mcp: MCPServer, deps: Deps) -> None:
    memory, identity = deps.memory, deps.identity
    if memory is None:
        return

    @mcp.tool(annotations=READ)
    @tool_boundary
    def query_memory(
        query: Annotated[str, Field(description="what you are looking for, in words", min_length=1,
                                    max_length=2000)],
        task_type: Annotated[str | None, Field(description="only items of this task type", max_length=40)] = None,
        kinds: Annotated[list[Literal["lesson", "critique", "output", "message", "note"]] | None,
                         Field(description="only these kinds")] = None,
        tags: Annotated[list[Tag] | None, Field(description="only items with all these tags",
                                                max_length=MAX_TAGS)] = None,
        k: Annotated[int, Field(description="how many results", ge=1, le=20)] = 5,
        include_deprecated: Annotated[bool, Field(description="also superseded items")] = False,
        mode: Annotated[Literal["hybrid", "vector", "keyword"], Field(description="hybrid: meaning and "
                        "keywords fused (best); vector or keyword alone")] = "hybrid",
    ) -> Results:
        """Search the team's shared memory — lessons, critiques, task outputs, messages — by meaning and keyword."""
        return memory.query(query, task_type=task_type, kinds=kinds, tags=tags, k=k,
                            include_deprecated=include_deprecated, mode=mode)

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def record_lesson(
        ctx: Context,
        problem: Annotated[str, Field(description="what went wrong (or could)", min_length=1, max_length=4000)],
        fix: Annotated[str, Field(description="how it was fixed / what to do instead", min_length=1,
                                  max_length=4000)],
        task_type: Annotated[str, Field(description="the kind of task it applies to: code, test, docs, …",
                                        max_length=40)],
        title: Annotated[str | None, Field(max_length=200)] = None,
        tags: Annotated[list[Tag], Field(description="e.g. ['sql', 'security']", max_length=MAX_TAGS)] = [],
        task_id: Annotated[int | None, Field(description="the task it came from", ge=1, le=MAX_ID)] = None,
        supersedes: Annotated[int | None, Field(description="id of an older lesson this one replaces (it is "
                                                "then hidden from searches)", ge=1, le=MAX_ID)] = None,
    ) -> Recorded:
        """Teach the team: store a lesson for the next agent doing this type of task (duplicates are merged)."""
        return memory.record_lesson(identity.require(ctx), problem=problem, fix=fix, task_type=task_type,
                                    title=title, tags=tags, task_id=task_id, supersedes=supersedes)
