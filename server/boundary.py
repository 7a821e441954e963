"""The strict edge of the MCP surface: what every tool call passes before the board sees it.

Text that cannot be stored and read back (NUL, lone surrogates) is refused before anything is
written; unknown arguments are refused with a did-you-mean; a rejected argument gets one sentence
naming it; board and memory errors become tool errors with the board's own sentence; results go out
as compact JSON. The layers below can then trust their input.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import logging
import re
from collections.abc import Callable
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from hiveboard.board import BoardError
from hiveboard.memory.embeddings import EmbeddingError
from hiveboard.memory.index import EmbeddingMismatch, IndexUnavailable

from .compat import rejected_arguments

MAX_ID = 2**63 - 1  # SQLite's INTEGER range
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
TaskId = Annotated[int, Field(description="task id, as shown by list_tasks or get_board", ge=1, le=MAX_ID)]
Token = Annotated[int, Field(description="the fencing token claim_task returned for this card", ge=0, le=MAX_ID)]

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
CREATE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
CHANGE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)
IDEMPOTENT = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)

TOOL_ERRORS = (BoardError, EmbeddingError, EmbeddingMismatch, IndexUnavailable)

# Structural bounds on every argument (the body of a stdio request has no size limit of its own).
MAX_DEPTH = 6
MAX_ITEMS = 500
MAX_KEYS = 100
MAX_KEY_CHARS = 200
MAX_STRING = 250_000  # above the board's largest field (an output or artifact of 200,000)

log = logging.getLogger("hiveboard")


def as_result(value: BaseModel) -> CallToolResult:
    """Structured output plus its text twin as compact JSON without nulls (the SDK's default text is
    indented and keeps every null, which costs the reading model tokens and every call bytes)."""
    return CallToolResult(content=[TextContent(type="text", text=value.model_dump_json(exclude_none=True))],
                          structured_content=value.model_dump(mode="json"))


def check_text(value, where: str) -> None:
    """Refuse text that cannot be stored and read back for everyone: NUL characters and lone UTF-16
    surrogates (which JavaScript clients can send), anywhere in an argument."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ToolError(f"{where} contains a NUL character (\\u0000); send the text without it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(f"{where} contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid "
                            "Unicode; send valid UTF-8 text") from None
    elif isinstance(value, BaseModel):
        check_text(value.model_dump(), where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, f"a key of {where}")
            check_text(item, f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else where)
    elif isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            check_text(item, f"{where}[{n}]")


def _check_arguments(kwargs: dict) -> None:
    for name, value in kwargs.items():
        if not isinstance(value, Context):
            check_text(value, name)


def tool_boundary(fn: Callable) -> Callable:
    """Wrap a tool: refuse text that cannot be stored (before anything is written), turn board and
    memory errors into tool errors the model can read (nothing was written), compact results. Works on
    sync and async tools."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            _check_arguments(kwargs)
            try:
                return as_result(await fn(*args, **kwargs))
            except TOOL_ERRORS as exc:
                raise ToolError(str(exc)) from exc

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _check_arguments(kwargs)
        try:
            return as_result(fn(*args, **kwargs))
        except TOOL_ERRORS as exc:
            raise ToolError(str(exc)) from exc

    return wrapper


class StrictServer(MCPServer):
    """An MCPServer whose tools refuse unknown arguments (with a did-you-mean) and answer a rejected
    argument with one sentence naming it, instead of pydantic's dump."""

    _parameters: dict[str, list[str]] | None = None

    async def call_tool(self, name: str, arguments: dict, context=None):
        if self._parameters is None:
            self._parameters = {t.name: list(t.input_schema.get("properties", {})) for t in await self.list_tools()}
        known = self._parameters.get(name)
        if known is not None:
            unknown = [key for key in arguments if key not in known]
            if unknown:
                raise ToolError(_unknown_arguments(name, unknown, known))
            for key, value in arguments.items():
                if (problem := oversized(value, key)) is not None:
                    raise ToolError(f"{name}: {problem}; nothing was done")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            # a bug of ours, not the caller's: log it, and still tell the caller something it can act on
            log.error("tool %s failed", name, exc_info=exc.__cause__ or exc)
            raise ToolError(f"{name} failed inside the server ({type(exc.__cause__ or exc).__name__}; the server log "
                            "has the details). Check with get_task or get_messages whether it took effect before "
                            "you retry") from None
        except ToolError as exc:
            if (invalid := rejected_arguments(exc)) is not None:
                raise ToolError(_rejected(name, invalid)) from None
            prefix = f"Error executing tool {name}: "
            if str(exc).startswith(prefix):  # the SDK's wrapping of our own sentence: name the tool as we do
                raise ToolError(f"{name}: {str(exc)[len(prefix):]}") from exc.__cause__
            raise


def oversized(value, where: str, depth: int = 0) -> str | None:
    """The structural bounds every argument keeps, whatever its schema says (each tool's own, tighter
    limits follow): nesting depth, items per list, keys per object, characters per string."""
    if depth > MAX_DEPTH:
        return f"argument {where!r} is nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            return f"argument {where!r} is {len(value)} characters; at most {MAX_STRING} are accepted"
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            return f"argument {where!r} has {len(value)} items; at most {MAX_ITEMS} are accepted"
        for n, item in enumerate(value):
            if (problem := oversized(item, f"{where}[{n}]", depth + 1)) is not None:
                return problem
    elif isinstance(value, dict):
        if len(value) > MAX_KEYS:
            return f"argument {where!r} has {len(value)} keys; at most {MAX_KEYS} are accepted"
        for key, item in value.items():
            if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
                return f"a key of argument {where!r} is {len(key)} characters; at most {MAX_KEY_CHARS}"
            if (problem := oversized(item, f"{where}.{key}", depth + 1)) is not None:
                return problem
    return None


def _unknown_arguments(tool: str, unknown: list[str], known: list[str]) -> str:
    guesses = [f"{key!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(key, known, 1)) else
               repr(key) for key in unknown[:5]]
    return (f"{tool} has no argument {', '.join(guesses)}; nothing was done. It takes: {', '.join(known)}")


def _rejected(tool: str, error: ValidationError) -> str:
    """One sentence: which argument, what was wrong with it (pydantic's message, without the dump)."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "the arguments"
    more = f" ({len(problems) - 1} more problem(s) after you fix it)" if len(problems) > 1 else ""
    return f"{tool}: argument {where!r}: {first['msg']}; nothing was done{more}"


def tool_token_costs(mcp_tools: list) -> list[tuple[str, int, int]]:
    """Approximate context cost of each tool definition, in tokens (JSON characters / 4).

    Returns (name, what every client sends the model: name, description, input schema and
    annotations; the output schema, which only some clients pass on).
    """
    costs = []
    for tool in mcp_tools:
        wire = tool.model_dump(exclude_none=True, by_alias=True)
        output = wire.pop("outputSchema", {})
        costs.append((tool.name, len(json.dumps(wire)) // 4, len(json.dumps(output)) // 4))
    return costs


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_CHECKED_BODY = 8 * 1024 * 1024  # larger bodies go to the SDK unchecked (and meet its own size limit)


def _lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


class UnicodeGuard:
    """ASGI middleware: a JSON-RPC body whose strings hold a lone UTF-16 surrogate escape (which JavaScript
    clients can send) is answered with an error that says so and names the request, as on stdio; the
    SDK's own parser answers only "unexpected end of hex escape". Other bodies pass through unchanged."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        chunks, size, more = [], 0, True
        while more and size <= MAX_CHECKED_BODY:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if not more and _SURROGATE_ESCAPE.search(body):
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            if request is not None and _lone_surrogate(request):
                request_id = request.get("id") if isinstance(request, dict) else None
                answer = json.dumps({"jsonrpc": "2.0", "id": request_id if isinstance(request_id, (int, str)) else None,
                                     "error": {"code": -32602, "message": (
                                         "the request contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is "
                                         "not valid Unicode; nothing was done. Send valid UTF-8 text")}}).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": answer})
                return None
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        return await self.app(scope, replay, send)
