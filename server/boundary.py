"""The strict edge of the MCP surface: what every tool call passes before the board sees it, and
what the model is shown of the tools.

Text that cannot be stored and read back (NUL, lone surrogates) is refused before anything is
written; unknown arguments are refused with a did-you-mean; a rejected argument gets one sentence
naming it; board and memory errors become tool errors with the board's own sentence. The layers
below can then trust their input.

What goes out is lean. A result carries its data once, as compact JSON text: clients that read
only `content` (Claude Desktop) and clients that prefer `structuredContent` when present (Claude
Code, Cursor) then show the model the same thing, once. Input schemas are advertised compacted
(`compact_schema`) while arguments are still validated with the full pydantic model. The "full"
profile (HIVEBOARD_TOOL_PROFILE=full) adds output schemas and structured content for clients
that want typed results.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import logging
import re
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from hiveboard.board.errors import BoardError
from hiveboard.board.priority import FOREGROUND
from hiveboard.memory.errors import EmbeddingError, EmbeddingMismatch, IndexUnavailable

from . import lanes
from .compat import arguments_valid, rejected_arguments
from .config import Profile
from .identity import caller_key

# Ids and fencing tokens count up from 1 in SQLite (whose INTEGER stops at 2**63 - 1); JSON clients
# in JavaScript cannot send an integer above 2**53 - 1 exactly (RFC 7493), so that is the bound.
MAX_ID = 2**53 - 1
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
TaskId = Id
Token = Annotated[int, Field(ge=0, le=MAX_ID)]

# Only hints that differ from the spec's defaults (readOnlyHint false, destructiveHint true,
# idempotentHint false; the last two mean nothing on a read-only tool): a client reads a missing
# hint as its default, and every tools/list would carry the rest. openWorldHint (default true) is
# left at its default too: no client we know acts on it, and false on every tool costs tokens in every list;
# a client that does reads "may reach outside", the cautious side.
READ = ToolAnnotations(readOnlyHint=True)
CREATE = ToolAnnotations(destructiveHint=False)
CHANGE = ToolAnnotations()  # not read-only, may destroy (the defaults), stated so the intent is visible
IDEMPOTENT = ToolAnnotations(destructiveHint=False, idempotentHint=True)

TOOLS_BUDGET = 3_150  # ~tokens of tools/list in the default profile, as tool_token_costs counts them (3,000 until
# flag_task, the honest exit, came in as a 22nd tool)

TOOL_ERRORS = (BoardError, EmbeddingError, EmbeddingMismatch, IndexUnavailable)

# Structural bounds on every argument (the body of a stdio request has no size limit of its own).
MAX_DEPTH = 6
MAX_ITEMS = 500
MAX_KEYS = 100
MAX_KEY_CHARS = 200
MAX_STRING = 250_000  # above the board's largest field at its default limits (an output or an artifact)

log = logging.getLogger("hiveboard")


def as_result(value: BaseModel, structured: bool = False) -> CallToolResult | InputRequiredResult:
    """The result as compact JSON text without nulls (the SDK's default text is indented and keeps
    every null, which costs the reading model tokens and every call bytes); with `structured`, also
    as structured content (the "full" profile: twice on the wire, once for the model). A question for the
    client (2026-07-28's input_required, server/approvals.py) goes out as it is."""
    if isinstance(value, InputRequiredResult):
        return value
    text = [TextContent(type="text", text=value.model_dump_json(exclude_none=True))]
    if structured:
        return CallToolResult(content=text, structured_content=value.model_dump(mode="json"))
    return CallToolResult(content=text)


def check_text(value, where: str) -> None:
    """Refuse text that cannot be stored and read back for everyone: NUL characters and lone UTF-16
    surrogates (which JavaScript clients can send), anywhere in an argument."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ToolError(f"{where} contains a NUL character (\\u0000); send the text without it")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(
                f"{where} contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid "
                "Unicode; send valid UTF-8 text"
            ) from None
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
    memory errors into tool errors the model can read (nothing was written). The StrictServer it is
    registered on turns the pydantic value it returns into the result its profile sends. Works on
    sync and async tools."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            _check_arguments(kwargs)
            try:
                return await fn(*args, **kwargs)
            except TOOL_ERRORS as exc:
                raise ToolError(str(exc)) from exc

        async_wrapper.hiveboard_boundary = True
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _check_arguments(kwargs)
        try:
            return fn(*args, **kwargs)
        except TOOL_ERRORS as exc:
            raise ToolError(str(exc)) from exc

    wrapper.hiveboard_boundary = True
    return wrapper


def _answering(fn: Callable, structured: bool, lane: lanes.Lane) -> Callable:
    """A boundary-wrapped tool whose pydantic value goes out through as_result; a sync one (board work only)
    runs in its turn on `lane` (server/lanes.py)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_answer(*args, **kwargs):
            return as_result(await fn(*args, **kwargs), structured)

        return async_answer

    def answer_now(*args, **kwargs):
        return as_result(fn(*args, **kwargs), structured)

    @functools.wraps(fn)
    async def answer(*args, **kwargs):
        return await lanes.run(lane, answer_now, *args, **kwargs)

    return answer


class StrictServer(MCPServer):
    """An MCPServer whose tools refuse unknown arguments (with a did-you-mean), answer a rejected
    argument with one sentence naming it instead of pydantic's dump, and are advertised lean.

    `profile`: "lean" (default) sends each result's data once, as compact JSON text, and no output
    schemas; "full" adds structured content and output schemas. Both advertise compacted input
    schemas."""

    _parameters: dict[str, list[str]] | None = None

    def __init__(self, *args, profile: Profile = "lean", embedded: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.profile = profile
        self.embedded = embedded  # the board is on SQLite: its lane work runs on the event loop (lanes.run)

    def add_tool(self, fn: Callable, *args, structured_output: bool | None = None, **kwargs) -> None:
        if getattr(fn, "hiveboard_boundary", False):
            structured = self.profile == "full"
            annotations = kwargs.get("annotations")
            lane: lanes.Lane = "read" if annotations is not None and annotations.read_only_hint else "write"
            fn, structured_output = _answering(fn, structured, lane), structured
        super().add_tool(fn, *args, structured_output=structured_output, **kwargs)
        self._parameters = None

    async def list_tools(self) -> list:
        """The tools as advertised: input schemas compacted (the SDK keeps the full pydantic model to
        validate arguments with)."""
        return [
            tool.model_copy(
                update={
                    "input_schema": compact_schema(tool.input_schema),
                    "description": " ".join((tool.description or "").split()),
                    "annotations": tool.annotations
                    if tool.annotations and tool.annotations.model_dump(exclude_none=True)
                    else None,  # all defaults: say nothing
                }
            )
            for tool in await super().list_tools()
        ]

    async def _check_shape(self, name: str, arguments: dict) -> None:
        """Refuse unknown and oversized arguments (before the SDK's validation, whose messages are long)."""
        if self._parameters is None:
            self._parameters = {t.name: t.input_schema.get("properties", {}) for t in await super().list_tools()}
        known = self._parameters.get(name)
        if known is not None:
            unknown = [key for key in arguments if key not in known]
            if unknown:
                raise ToolError(_unknown_arguments(name, unknown, list(known)))
            for key, value in arguments.items():
                if (problem := oversized(value, key, bound=_own_bound(known[key], value))) is not None:
                    raise ToolError(f"{name}: {problem}; nothing was done")

    async def would_refuse(self, name: str, arguments: dict) -> bool:
        """Whether a call would be refused before its tool runs (an unknown, oversized, invalid or unstorable
        argument), checked without calling it: what must not start work that outlives the call (an MCP task)."""
        try:
            await self._check_shape(name, arguments)
            _check_arguments(arguments)
        except ToolError:
            return True
        return not arguments_valid(self, name, arguments)

    async def call_tool(self, name: str, arguments: dict, context=None):
        await self._check_shape(name, arguments)
        lanes.caller.set(caller_key(context))  # this call's task only: the lanes take callers in turn
        lanes.embedded.set(self.embedded)
        try:
            with FOREGROUND.serving():  # the memory's Chroma writes wait for a moment without calls
                return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            # a bug of ours, not the caller's: log it, and still tell the caller something it can act on
            log.error("tool %s failed", name, exc_info=exc.__cause__ or exc)
            raise ToolError(
                f"{name} failed inside the server ({type(exc.__cause__ or exc).__name__}; the server log "
                "has the details). Check with get_task or get_messages whether it took effect before "
                "you retry"
            ) from None
        except ToolError as exc:
            if (invalid := rejected_arguments(exc)) is not None:
                raise ToolError(_rejected(name, invalid)) from None
            prefix = f"Error executing tool {name}: "
            if str(exc).startswith(prefix):  # the SDK's wrapping of our own sentence: name the tool as we do
                raise ToolError(f"{name}: {str(exc)[len(prefix) :]}") from exc.__cause__
            raise


def _own_bound(schema: dict, value) -> int | None:
    """The argument's own advertised length bound, when it is tighter than the structural one."""
    for branch in [schema, *schema.get("anyOf", ())]:  # an optional argument's bound is in its non-null branch
        if isinstance(value, str) and "maxLength" in branch:
            return branch["maxLength"]
        if isinstance(value, list) and "maxItems" in branch:
            return branch["maxItems"]
    return None


def oversized(value, where: str, depth: int = 0, bound: int | None = None) -> str | None:
    """The structural bounds every argument keeps, whatever its schema says: nesting depth, items per
    list, keys per object, characters per string (`bound`: the argument's own, if tighter, is named)."""
    if depth > MAX_DEPTH:
        return f"argument {where!r} is nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            return (
                f"argument {where!r} is {len(value)} characters; at most {min(MAX_STRING, bound or MAX_STRING)} "
                "are accepted"
            )
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            return (
                f"argument {where!r} has {len(value)} items; at most {min(MAX_ITEMS, bound or MAX_ITEMS)} are accepted"
            )
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
    guesses = [
        f"{key!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(key, known, 1)) else repr(key)
        for key in unknown[:5]
    ]
    return f"{tool} has no argument {', '.join(guesses)}; nothing was done. It takes: {', '.join(known)}"


def _rejected(tool: str, error: ValidationError) -> str:
    """One sentence: which argument, what was wrong with it (pydantic's message, without the dump)."""
    problems = error.errors(include_url=False)
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "the arguments"
    more = f" ({len(problems) - 1} more problem(s) after you fix it)" if len(problems) > 1 else ""
    return f"{tool}: argument {where!r}: {first['msg']}; nothing was done{more}"


# ----------------------------------------------------------------------------- advertised schemas

_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains")
_EMPTY_DEFAULTS = (None, [], {}, "", False)  # what an omitted argument obviously means
_JSON_TYPES = {"string": str, "boolean": bool}


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema as the model needs it, with every constraint kept (types, enums, bounds,
    lengths, required) and what says nothing dropped: titles (the property name says it), the type
    of an enum of strings, `additionalProperties: true` (the default),
    `$defs` (inlined, without the model's docstring, which is written for Python readers; none of
    hiveboard's argument models is recursive), `anyOf: [X, null]` of an argument whose default is
    null (X: omitting it means null), and defaults that say "empty" or "off" (null, [], {}, "",
    false). Other defaults stay: they tell the model what it gets. An id's bound `maximum: MAX_ID` (the
    largest integer JSON carries exactly) goes too: it tells a model nothing, costs tokens per id, and the
    server still refuses a larger number (the SDK validates with the full model). So does a string's
    `maxLength`: a model does not count characters as it writes, and the server refuses a longer string
    in one sentence naming the argument and its bound (docs/reference.md counts what both save)."""
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int = 0) -> Any:
        if not isinstance(node, dict):
            return node
        if depth > 20:
            raise ValueError("compact_schema: a $ref cycle (recursive model); keep $defs for it")
        if "$ref" in node and node["$ref"].startswith("#/$defs/"):
            target = walk(defs[node["$ref"].split("/")[-1]], depth + 1)
            target.pop("description", None)
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$defs", "maxLength") or (key == "maximum" and value == MAX_ID):
                continue
            if key in _SCHEMA_MAPS:
                out[key] = {name: walk(sub, depth) for name, sub in value.items()}
            elif key in _SCHEMA_LISTS:
                out[key] = [walk(sub, depth) for sub in value]
            elif key in _SCHEMA_ONE:
                out[key] = walk(value, depth)
            else:
                out[key] = value
        if "default" in out and out["default"] is None:
            branches = out.get("anyOf", [])
            real = [b for b in branches if b != {"type": "null"}]
            if len(branches) == 2 and len(real) == 1:
                del out["anyOf"]
                out = {**real[0], **out}
        if (
            "enum" in out
            and out.get("type") in _JSON_TYPES
            and all(isinstance(v, _JSON_TYPES[out["type"]]) for v in out["enum"])
        ):
            del out["type"]  # the enum says it
        if out.get("additionalProperties") is True:
            del out["additionalProperties"]  # JSON Schema's default
        if "default" in out and any(
            out["default"] == empty and type(out["default"]) is type(empty) for empty in _EMPTY_DEFAULTS
        ):
            del out["default"]
        return out

    return walk(schema)


def tool_token_costs(mcp_tools: list) -> list[tuple[str, int, int]]:
    """Approximate context cost of each tool definition as tools/list sends it, in tokens (compact
    JSON characters / 4).

    Returns (name, name + description + input schema + annotations, the output schema when the
    profile sends one: Claude Code does not show it to the model, other clients may).
    """
    costs = []
    for tool in mcp_tools:
        wire = tool.model_dump(mode="json", exclude_none=True, by_alias=True)
        output = wire.pop("outputSchema", None)
        costs.append((tool.name, len(_compact_json(wire)) // 4, len(_compact_json(output)) // 4 if output else 0))
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
                answer = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id if isinstance(request_id, (int, str)) else None,
                        "error": {
                            "code": -32602,
                            "message": (
                                "the request contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is "
                                "not valid Unicode; nothing was done. Send valid UTF-8 text"
                            ),
                        },
                    }
                ).encode()
                await send(
                    {"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]}
                )
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


def _compact_json(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
