"""Page cursors: the opaque `next_cursor` a listing hands out and takes back.

A cursor is a few non-negative integers (where the last page stopped, e.g. a priority and a task id)
joined by ":" and base64url-encoded. It is opaque to agents, so a caller that tampers with it gets the
same sentence whatever is wrong: pass back what the tool gave, or start again.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

from .errors import InvalidInput

_PART = re.compile(r"[0-9]{1,19}")  # ASCII digits only; at most what an SQLite integer holds (checked below)
_SQLITE_MAX = 2**63 - 1


def encode_cursor(*parts: int) -> str:
    """The cursor for these integers."""
    return base64.urlsafe_b64encode(":".join(str(int(p)) for p in parts).encode()).decode()


def invalid_cursor(tool: str) -> InvalidInput:
    """The error for a cursor `tool` did not hand out."""
    return InvalidInput(
        f"cursor is not valid: pass the next_cursor value from the previous {tool} answer unchanged, "
        "or omit it for the first page"
    )


def decode_cursor(
    cursor: str, tool: str, n: int = 2, valid: Callable[[tuple[int, ...]], bool] | None = None
) -> tuple[int, ...]:
    """The `n` integers in a cursor from `tool`; InvalidInput naming `tool` if it is not one (or `valid`
    refuses its parts)."""
    try:
        text = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
        if text.startswith("[") and text.endswith("]"):  # get_messages' older cursors: a JSON list of ints
            strings = [part.strip() for part in text[1:-1].split(",")]  # read as text: never a parser's recursion
        else:
            strings = text.split(":")
    except ValueError as exc:  # bad base64 or UTF-8
        raise invalid_cursor(tool) from exc
    if len(strings) != n or not all(_PART.fullmatch(s) for s in strings):
        raise invalid_cursor(tool)
    parts = tuple(int(s) for s in strings)
    if any(p > _SQLITE_MAX for p in parts) or (valid is not None and not valid(parts)):
        raise invalid_cursor(tool)
    return parts
