"""`POST /hooks/EVENT` and `POST /hooks/view/CALL`: `hiveboard hook` for a board reached only over HTTP.

A hook run with HIVEBOARD_URL set opens no database (server/hook.py, RemoteView). It posts the event here with
the agent's bearer token; the server runs the same `hook.on_board` the local hook runs, on its own database,
with the agent's hook state in its own data directory (HOME/hooks/<agent>.json, the local format), and answers
what the hook prints: `{"agent", "exit_code", "stdout", "stderr"}`.

The transcript whose usage stop and session-end record is a file of the hook's machine, so the hook reads it
there (keeping how far it read under the token's agent: `POST /hooks/agent` names it) and makes the view calls
record_cost makes through `/hooks/view/`: `cards`, `holdings` and `record-usage`. After recording, the server
checks the cards' budgets with its own board, as the local hook does with its (hook.note_budgets).

The edge is strict: an agent's token on every request (the operator's server token names no agent: refused);
the agent is the token's, never a field of the body; a JSON body of at most BODY_MAX bytes, validated by the
models below (an unknown event, call or field is refused in one sentence, with nothing written); usage is
recorded for the token's agent only, against cards it has claimed. The Site checked the Host header (DNS
rebinding); an Origin header that is not the board's own (a browser page) is refused.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hiveboard.board.errors import Unavailable
from hiveboard.board.hook_view import TOKENS_MAX, UsageRefused, View

from . import hook, lanes
from .boundary import check_text
from .identity import bearer_token
from .web.auth import origin_allowed

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board

    from .config import Settings

log = logging.getLogger("hiveboard")

BODY_MAX = 64_000  # bytes: a hook's input is a few fields; record-usage a row per (card, model)
M = TypeVar("M", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HookInput(_Strict):
    """What the hook sends of Claude Code's input: what the events' logic reads (hook.WIRE_FIELDS)."""

    session_id: str = Field("", max_length=200, description="Claude Code's session id")
    stop_hook_active: bool = Field(False, description="this Stop follows a block by a Stop hook")


class HookAnswer(BaseModel):
    """What the hook prints, and the agent the token named (the hook keeps its transcript offsets under it)."""

    agent: str
    exit_code: int = Field(description="0, or 2 with feedback on stderr (task-completed, teammate-idle)")
    stdout: str = Field(description="the hook's JSON output with its newline, or empty")
    stderr: str = Field(description="a note or the feedback, or empty")


class NoArguments(_Strict):
    pass


class Since(_Strict):
    since: float = Field(ge=0, allow_inf_nan=False, description="epoch seconds of the oldest usage to place")


class UsageRow(_Strict):
    """One (card, model) of a stretch of a session, as record_cost sums it."""

    task_id: int | None = Field(None, ge=1, description="the card held when the tokens were spent; null: none")
    model: str = Field("", max_length=200)
    input_tokens: int = Field(0, ge=0, le=TOKENS_MAX)
    output_tokens: int = Field(0, ge=0, le=TOKENS_MAX)
    cache_creation_tokens: int = Field(0, ge=0, le=TOKENS_MAX)
    cache_read_tokens: int = Field(0, ge=0, le=TOKENS_MAX)
    messages: int = Field(0, ge=0, le=10_000_000)


class Usage(_Strict):
    session_id: str = Field("", max_length=200)
    rows: list[UsageRow] = Field(max_length=500)


class Refused(Exception):
    """A request answered with a status and one sentence; nothing was written."""

    def __init__(self, status: int, sentence: str):
        super().__init__(sentence)
        self.status = status

    def response(self) -> JSONResponse:
        headers = {"www-authenticate": 'Bearer realm="hiveboard"'} if self.status == 401 else None
        return JSONResponse({"error": str(self)}, status_code=self.status, headers=headers)


def hook_routes(settings: Settings, board: Board) -> list[Route]:
    """The routes of the hook endpoint, for the Site's Starlette app (server/cli.py http_app)."""
    folder = settings.home / "hooks"  # the agents' hook state, as the local hook keeps it in its HOME
    database = settings.database

    async def agent_of(request: Request) -> str:
        origin = request.headers.get("origin")
        if origin is not None and not origin_allowed(origin, request.headers.get("host", ""), settings.allowed_origins):
            raise Refused(403, f"Origin {origin!r} may not call the hook endpoint; hooks send no Origin")
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise Refused(401, "the hook endpoint needs 'Authorization: Bearer <agent token>' (HIVEBOARD_TOKEN_FILE)")
        if settings.http_token and hmac.compare_digest(token.encode(), settings.http_token.encode()):
            raise Refused(401, "the server token names no agent: the hook needs the agent's own token")
        try:
            agent = await lanes.off_loop(board.agents.by_token, token)
        except Unavailable as exc:
            raise Refused(503, str(exc)) from None
        if agent is None:
            raise Refused(
                401,
                "the bearer token matches no agent (it may have been replaced by a newer one); the operator gets "
                "an agent's token with `hiveboard agent token NAME`",
            )
        return agent.name

    def run_event(agent: str, event: str, payload: dict) -> tuple[int, str, str]:
        try:
            return hook.on_board(database, folder, agent, event, payload, cost=False)
        except hook.Skip:
            raise
        except Exception as exc:  # the hook fails open; the cause is for the operator's log, not the agent
            log.warning("hook %s for %s: the board could not be read: %s", event, agent, exc)
            raise hook.Unreachable(f"the board's server could not read its database ({type(exc).__name__})") from None

    async def event(request: Request) -> JSONResponse:
        try:
            agent = await agent_of(request)
            name = request.path_params["event"]
            if name not in hook.EVENTS:
                raise Refused(400, f"unknown hook event {name!r}; one of {', '.join(hook.EVENTS)}")
            payload = _valid(HookInput, await _body(request)).model_dump()
        except Refused as refused:
            return refused.response()
        code, out, err = await lanes.off_loop(hook.fail_open, run_event, agent, name, payload)
        return JSONResponse(HookAnswer(agent=agent, exit_code=code, stdout=out, stderr=err).model_dump())

    async def whoami(request: Request) -> JSONResponse:
        try:
            agent = await agent_of(request)
            _valid(NoArguments, await _body(request))
        except Refused as refused:
            return refused.response()
        return JSONResponse({"agent": agent})

    def record_usage(view: View, agent: str, usage: Usage) -> dict:
        spent_on = _record_usage(view, agent, usage, board.quotas.cap("usage_records_per_hour"))
        # what the local hook does after recording (hook.note_budgets), with the board this server has open
        if spent_on:
            try:
                board.usage.check_budgets(spent_on, settings.budget_action)
            except Exception as exc:  # the usage is recorded: the hook must keep its offsets, so this still answers
                log.warning(
                    "hook: budgets of cards %s not checked (checked again at the next recording): %s", spent_on, exc
                )
        return {"recorded": len(usage.rows)}

    calls: dict[str, tuple[type[BaseModel], Callable[[View, str, Any], dict]]] = {
        "cards": (NoArguments, _cards),
        "holdings": (Since, _holdings),
        "record-usage": (Usage, record_usage),
    }

    async def view_call(request: Request) -> JSONResponse:
        try:
            agent = await agent_of(request)
            name = request.path_params["call"]
            if name not in calls:
                raise Refused(404, f"no hook view call {name!r}; one of {', '.join(calls)}")
            model, call = calls[name]
            arguments = _valid(model, await _body(request))
            # in the agent's turn, as its MCP calls are (one request in service, then the lanes' round): a flood of
            # posts queues behind itself
            who = ("token", bearer_token(request.headers.get("authorization")))
            async with lanes.turn(who):
                lanes.caller.set(who)
                lane: lanes.Lane = "write" if name == "record-usage" else "read"
                found = await lanes.run(lane, _on_view, database, call, agent, arguments, board_only=False)
            return JSONResponse(found)
        except Refused as refused:
            return refused.response()

    return [
        Route("/hooks/agent", whoami, methods=["POST"]),
        Route("/hooks/view/{call}", view_call, methods=["POST"]),
        Route("/hooks/{event}", event, methods=["POST"]),
    ]


# ---------------------------------------------------------------- the view calls record_cost makes


def _cards(view: View, agent: str, _: NoArguments) -> dict:
    return {"cards": view.cards(agent)}


def _holdings(view: View, agent: str, arguments: Since) -> dict:
    spans = view.holdings(agent, arguments.since)
    return {"holdings": [[start, None if math.isinf(until) else until, card] for start, until, card in spans]}


def _record_usage(view: View, agent: str, usage: Usage, per_hour: int = 0) -> list[int]:
    """Record the rows for `agent` as the local hook does (View.record_usage: only against a card it holds or held
    last, a row's tokens bounded, at most `per_hour` rows an hour), a refusal answered with its status; the cards
    named."""
    try:
        return view.record_usage(agent, usage.session_id, [r.model_dump() for r in usage.rows], per_hour)
    except UsageRefused as exc:
        raise Refused(exc.status, str(exc)) from None


def _on_view(database: str, call: Callable[[View, str, Any], dict], agent: str, arguments: BaseModel) -> dict:
    try:
        view = View(database)
    except Exception as exc:
        log.warning("hook view: the board could not be opened: %s", exc)
        raise Refused(503, f"the board's server could not open its database ({type(exc).__name__})") from None
    try:
        return call(view, agent, arguments)
    except Refused:
        raise
    except Exception as exc:
        log.warning("hook view for %s: %s", agent, exc)
        raise Refused(503, f"the board's server could not read its database ({type(exc).__name__})") from None
    finally:
        view.close()


# ---------------------------------------------------------------- the body


async def _body(request: Request) -> object:
    """The request's JSON, at most BODY_MAX bytes of it."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise Refused(415, "send the body as JSON (Content-Type: application/json)")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > BODY_MAX):
        raise Refused(413, f"the body is larger than {BODY_MAX} bytes; a hook sends a few fields")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > BODY_MAX:
            raise Refused(413, f"the body is larger than {BODY_MAX} bytes; a hook sends a few fields")
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise Refused(400, "the body is not JSON") from None


def _valid(model: type[M], body: object) -> M:
    try:
        check_text(body, "the body")
        return model.model_validate(body)
    except ToolError as exc:
        raise Refused(400, str(exc)) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        if first["type"] == "extra_forbidden":
            raise Refused(
                400, f"unknown field {where!r}; this call takes {', '.join(model.model_fields) or 'no field'}"
            ) from None
        raise Refused(400, f"{where}: {first['msg']}; nothing was written") from None
