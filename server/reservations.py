"""Tools over path reservations: reserve the paths you are about to edit, release them when done.

The globs, their overlap and their lifetime are board/reservations.py's; `hiveboard guard` (guard.py) refuses
commits that touch another agent's exclusive reservation.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from hiveboard.board.models import Released, Reserved
from hiveboard.board.reservations import DEFAULT_TTL, MAX_PATTERNS, MAX_TTL, PATTERN_CHARS, REASON_CHARS

from .boundary import CHANGE, CREATE, MAX_ID, tool_boundary
from .deps import Deps

Patterns = Annotated[
    list[Annotated[str, Field(max_length=PATTERN_CHARS)]], Field(min_length=1, max_length=MAX_PATTERNS)
]


def register(mcp: MCPServer, deps: Deps) -> None:
    board, identity = deps.board, deps.identity

    @mcp.tool(annotations=CREATE)
    @tool_boundary
    def reserve_paths(
        ctx: Context,
        paths: Annotated[Patterns, Field(description="e.g. src/api/**")],
        ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL)] = DEFAULT_TTL,
        exclusive: bool = True,
        reason: Annotated[str | None, Field(max_length=REASON_CHARS)] = None,
        task_id: Annotated[int | None, Field(description="default: the card you hold", ge=1, le=MAX_ID)] = None,
    ) -> Reserved:
        """Reserve paths you will edit; refused if they overlap another's exclusive ones."""
        return board.reservations.reserve(identity.require(ctx), paths, ttl_seconds, exclusive, reason, task_id)

    @mcp.tool(annotations=CHANGE)
    @tool_boundary
    def release_paths(ctx: Context, paths: Patterns) -> Released:
        """Release your reservations of these patterns."""
        return board.reservations.release(identity.require(ctx), paths)
