"""The web board's routes: pages, actions, live events, static files."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, get_args
from urllib.parse import parse_qs, quote, urlencode

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from hiveboard.board.errors import BoardError, Conflict, Forbidden, IllegalTransition, NotFound
from hiveboard.board.knowledge import MAX_TAGS
from hiveboard.board.messages import NewMessage
from hiveboard.board.models import NewTask, TaskEdit
from hiveboard.board.tasks import Board
from hiveboard.memory.service import Mode

from .. import lanes
from ..boundary import TOOL_ERRORS
from . import pages
from .auth import COOKIE, Sessions, host_allowed, origin_allowed
from .live import LiveHub
from .pages import Viewer
from .text import for_people

if TYPE_CHECKING:
    from hiveboard.memory.service import Memory

MAX_FORM = 300_000  # bytes of a form post: above the largest description a person types
STATIC = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
STATIC |= dict.fromkeys(("charts.js", "chart.umd.min.js"), STATIC["app.js"])  # the charts (static/VENDOR.md)
STATIC |= {"favicon.svg": "image/svg+xml", "favicon.ico": "image/x-icon"}
STATUS_OF = {NotFound: 404, Forbidden: 403, Conflict: 409, IllegalTransition: 409}
# On every web response: the pages run only the board's own script files and styles (no inline script, no
# style attribute: hostile text that slipped past the sanitiser could run nothing), talk only to this board,
# post forms only to it, and are shown in no other site's frame.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


class Refused(Exception):
    """An action refused before anything was written: (HTTP status, one sentence)."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


class WebBoard:
    """The state the web routes share: the board, memory, sessions, the live hub and the access rules."""

    def __init__(
        self,
        board: Board,
        *,
        memory: Memory | None = None,
        hosts: list[str],
        origins: list[str],
        read_only: bool = False,
        presence: float = 120.0,
    ):
        self.board, self.memory = board, memory
        self.sessions = Sessions(board)
        self.hub = LiveHub(board)
        self.hosts, self.origins, self.read_only, self.presence = hosts, origins, read_only, presence

    # ------------------------------------------------------------------ who is asking

    def viewer(self, request: Request) -> Viewer | None:
        cookie = request.cookies.get(COOKIE)
        person = self.sessions.person(cookie)
        if person is not None:
            self.board.agents.seen(person.name)  # a person reading the board is present, as an agent calling is
            return Viewer(person.name, self.sessions.csrf(cookie), self.read_only)
        return Viewer(None, None, True) if self.read_only else None

    async def acting(self, request: Request) -> tuple[Viewer, dict[str, str]]:
        """The person behind an action and its form, or Refused. Checks, in order: logged in, the board
        is not read-only, the Origin is the board's own, the CSRF token, the form itself."""
        viewer = await lanes.off_loop(self.viewer, request)
        if viewer is None or viewer.name is None:
            raise Refused(401, "log in first: actions need a person's session (the login page takes your token)")
        if viewer.read_only:
            raise Refused(403, "this board is read-only (a wall screen): actions are off on this server")
        origin = request.headers.get("origin")
        if origin is not None and not origin_allowed(origin, request.headers.get("host", ""), self.origins):
            raise Refused(403, f"this action came from another site ({origin}); act from the board's own pages")
        form = await _form(request)
        sent = form.get("csrf") or request.headers.get("x-csrf-token")
        if not self.sessions.csrf_ok(request.cookies.get(COOKIE), sent):
            raise Refused(403, "the form's CSRF token is missing or stale: reload the page and try again")
        return viewer, form


async def _form(request: Request) -> dict[str, str]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refused(413, f"the form is larger than {MAX_FORM} bytes; shorten the text")
    try:
        text = body.decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=False, errors="strict", max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "the form is not valid UTF-8 url-encoded text; send it from the board's page") from None
    form = {k: v[0] for k, v in fields.items()}
    for key, value in form.items():
        if "\x00" in value or "\x00" in key:
            raise Refused(400, f"the field {key!r} contains a NUL character; send the text without it")
    return form


def _filters(request: Request) -> dict[str, str | None]:
    q = request.query_params
    return {k: (q.get(k) or "").strip()[:100] or None for k in ("type", "agent", "label")}


def _fragment(request: Request, html: str, at: int) -> Response:
    """A page, or (live reloads ask with X-Fragment) only its main part; `at` (also in the page's
    data-live) is the newest board event it was rendered after."""
    if request.headers.get("x-fragment") == "main":
        start = html.index('<main id="main">') + len('<main id="main">')
        html = html[start : html.rindex("</main>")]
    return HTMLResponse(html, headers={"cache-control": "no-store", "x-board-at": str(at)})


def _back(path: str, said: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode({'said': said})}", status_code=303)


def card_page(board: Board, task_id: int, viewer: Viewer, said: str | None = None) -> str:
    """A card's page as `viewer` sees it: the card, its thread, its work (files or commit), review and lessons."""
    task = board.get(task_id, history=50, viewer=viewer.name)
    thread = board.messages.pool(task_id=task_id, full=True, limit=100).messages
    # hidden acceptance tests: a person logged in reads them; a wall screen (no one logged in) does not,
    # as anything that reaches its address could read them there
    tests = board.views.acceptance_tests(task_id) if task.hidden_tests and viewer.name else task.acceptance_tests
    return pages.task_page(
        task,
        # the web board's logins are people's; a wall screen (no one logged in) shows nothing hidden tests shaped
        board.reviews.trail(task_id) if viewer.name else board.reviews.sealed(board.reviews.trail(task_id)),
        thread,
        board.views.lessons(task_id),
        board.agents.names(500),
        viewer,
        said,
        board.usage.card(task_id),
        hand_ins=board.reviews.hand_ins(task_id, 2),
        tests=tests,
        approval=board.decisions.approval(task_id) if task.status == "needs_human" and viewer.acts else None,
        commits=board.commits.rounds(task_id)[-2:] if task.repo else None,
        answers=board.decisions.answers(task_id)[1] if task.status == "needs_human" and viewer.acts else None,
        canary=bool(viewer.name) and board.canaries.of(task_id),  # a person's to know, never a wall screen's
    )


def agents_page(board: Board, viewer: Viewer, presence: float) -> str:
    """The Agents page as `viewer` sees it: each agent's canaries and flags for a logged-in person only (they name
    the canary cards), never for a wall screen that anyone who reaches its address can read."""
    honesty = board.canaries.stats() if viewer.name else None
    return pages.agents_page(board.views.agents(), presence, time.time(), viewer, honesty)


def web_routes(web: WebBoard) -> list[Route]:
    board = web.board

    def page(render: Callable[[Request, Viewer], str]):
        """A GET page: the viewer (or the login page), the rendering off the event loop."""

        async def endpoint(request: Request) -> Response:
            viewer = await lanes.off_loop(web.viewer, request)
            if viewer is None:
                return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", status_code=303)
            try:
                # read before rendering: whatever the page shows is at least this new
                viewer.at = await lanes.off_loop(board.views.last_event)
                html = await lanes.off_loop(render, request, viewer)
            except BoardError as exc:
                return HTMLResponse(
                    pages.message_page("Not possible", for_people(str(exc))), status_code=STATUS_OF.get(type(exc), 400)
                )
            return _fragment(request, html, viewer.at)

        return endpoint

    def action(run: Callable[[Viewer, dict[str, str], Request], Response]):
        """A POST action: refused with one sentence and nothing written, or done and redirected."""

        async def endpoint(request: Request) -> Response:
            try:
                viewer, form = await web.acting(request)
                return await lanes.off_loop(run, viewer, form, request)
            except Refused as exc:
                return HTMLResponse(
                    pages.message_page("Refused", exc.text, request.headers.get("referer") or "/board"),
                    status_code=exc.status,
                )
            except BoardError as exc:
                return HTMLResponse(
                    pages.message_page("Not done", for_people(str(exc)), request.headers.get("referer") or "/board"),
                    status_code=STATUS_OF.get(type(exc), 400),
                )

        return endpoint

    # ------------------------------------------------------------------ pages

    def board_view(request: Request, viewer: Viewer) -> str:
        f = _filters(request)
        columns = [
            board.views.column(s, task_type=f["type"], agent=f["agent"], label=f["label"]) for s in pages.COLUMNS
        ]
        return pages.board_page(columns, f, board.views.choices(), viewer, request.query_params.get("said"))

    def column_view(request: Request, viewer: Viewer) -> str:
        f = _filters(request)
        status = request.path_params["status"]
        col = board.views.column(
            status, task_type=f["type"], agent=f["agent"], label=f["label"], after=request.query_params.get("after")
        )
        return pages.column(col, f)

    def task_view(request: Request, viewer: Viewer) -> str:
        return card_page(board, request.path_params["task_id"], viewer, request.query_params.get("said"))

    def messages_view(request: Request, viewer: Viewer) -> str:
        q = request.query_params
        task = q.get("task", "").strip()
        before = q.get("before", "").strip()
        filters = {"task": task or None, "intent": (q.get("intent") or "").strip()[:40] or None}
        found = board.messages.latest(
            task_id=int(task) if task.isdigit() else None,
            intent=filters["intent"],
            before=int(before) if before.isdigit() else None,
            limit=50,
        )
        older = found[-1].id if len(found) == 50 else None
        return pages.messages_page(found, filters, older, viewer)

    def agents_view(request: Request, viewer: Viewer) -> str:
        return agents_page(board, viewer, web.presence)

    def memory_view(request: Request, viewer: Viewer) -> str:
        q = {k: (request.query_params.get(k) or "").strip() for k in ("q", "mode", "kind", "task_type", "tags")}
        results, note = None, None
        if q["q"]:
            if web.memory is None:
                note = "memory is off on this server"
            else:
                tags = [t.strip() for t in q["tags"].split(",") if t.strip()][:MAX_TAGS] or None
                try:
                    results = web.memory.query(
                        q["q"][:2000],
                        task_type=q["task_type"] or None,
                        kinds=[q["kind"]] if q["kind"] else None,
                        tags=tags,
                        k=20,
                        mode=q["mode"] if q["mode"] in get_args(Mode) else "hybrid",
                    )
                    note = results.note
                except TOOL_ERRORS as exc:  # the same failures a tool reports, as a note on the page
                    note = str(exc)
            return pages.memory_page(q, results, note, viewer, held=board.knowledge.held(20))
        return pages.memory_page(q, None, None, viewer, recent=board.knowledge.recent(), held=board.knowledge.held(20))

    def memory_item_view(request: Request, viewer: Viewer) -> str:
        return pages.memory_item_page(board.knowledge.item(request.path_params["item_id"]), viewer)

    def metrics_view(request: Request, viewer: Viewer) -> str:
        return pages.metrics_page(board.reviews.stats(), board.views.round_counts(), viewer, board.usage.stats())

    # ------------------------------------------------------------------ actions

    def create(viewer: Viewer, form: dict[str, str], request: Request) -> Response:
        labels = [x.strip() for x in form.get("labels", "").split(",") if x.strip()]
        criteria = [x.strip() for x in form.get("criteria", "").splitlines() if x.strip()]
        try:
            new = NewTask(
                title=form.get("title", "").strip()[:200] or " ",
                description=form.get("description", ""),
                task_type=form.get("task_type", "code"),
                priority=form.get("priority", "medium"),
                labels=labels,
                acceptance_criteria=criteria,
                assignee=form.get("assignee") or None,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(x) for x in first["loc"])
            raise Refused(400, f"{field}: {first['msg'].lower()}; correct it and create the card again") from None
        made = board.create(viewer.name, new)
        return RedirectResponse(f"/task/{made.id}?{urlencode({'said': f'created task {made.id}'})}", status_code=303)

    def decide(viewer: Viewer, form: dict[str, str], request: Request) -> Response:
        """A person's decision; a pass only once confirmed: without a `confirm` field it approves nothing and
        answers with the confirmation, naming what a pass approves (the page's script asks in a dialog)."""
        task_id = request.path_params["task_id"]
        decision = form.get("decision", "")
        confirm = form.get("confirm") or None
        if decision == "pass" and confirm is None:
            approval = board.decisions.approval(task_id)
            return HTMLResponse(
                pages.confirm_page(approval, form.get("note", ""), viewer), headers={"cache-control": "no-store"}
            )
        rounds = form.get("rounds", "").strip()
        if rounds and not rounds.isdigit():
            raise Refused(400, "rounds: a whole number of more review rounds (0 for none); correct it")
        done = board.decisions.decide(
            viewer.name,
            task_id,
            decision,
            form.get("note", ""),
            form.get("assign_to") or None,
            confirm=confirm,
            rounds=int(rounds or 0),
        )
        return _back(f"/task/{task_id}", f"task {task_id} is now {done.status.replace('_', ' ')}")

    def edit(viewer: Viewer, form: dict[str, str], request: Request) -> Response:
        """A person edits a card's brief or priority: only the fields that differ from the card are sent, so
        an unchanged field (frozen criteria on a claimed card, say) is not an edit."""
        task_id = request.path_params["task_id"]
        card = board.get(task_id, history=0)
        wanted = {
            "title": form.get("title", card.title).strip(),
            "description": form.get("description", card.description).replace("\r\n", "\n"),
            "priority": form.get("priority", card.priority),
            "labels": [x.strip() for x in form.get("labels", ",".join(card.labels)).split(",") if x.strip()],
            "acceptance_criteria": [
                x.strip() for x in form.get("criteria", "\n".join(card.acceptance_criteria)).splitlines() if x.strip()
            ],
        }
        changed = {k: v for k, v in wanted.items() if v != getattr(card, k)}
        if not changed:
            return _back(f"/task/{task_id}", "nothing changed")
        try:
            change = TaskEdit(**changed)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(x) for x in first["loc"])
            raise Refused(400, f"{field}: {first['msg'].lower()}; correct it and save again") from None
        version = form.get("version", "")
        board.update(viewer.name, task_id, edit=change, expected_version=int(version) if version.isdigit() else None)
        return _back(f"/task/{task_id}", f"saved: {', '.join(k.replace('_', ' ') for k in changed)}")

    def post(viewer: Viewer, form: dict[str, str], request: Request) -> Response:
        task_id = request.path_params["task_id"]
        content = form.get("content", "").strip()
        if not content:
            raise Refused(400, "the message is empty: write what you want the card's thread to read")
        intent = (form.get("intent") or "comment").strip().lower() or "comment"
        board.get(task_id, history=0)  # a card that does not exist is a 404, not a message to nowhere
        board.messages.publish(viewer.name, NewMessage(intent=intent, task_id=task_id, content=content))
        return _back(f"/task/{task_id}", "message posted")

    # ------------------------------------------------------------------ session, live, static

    async def login_form(request: Request) -> Response:
        return HTMLResponse(pages.login_page(next_url=_safe_next(request.query_params.get("next"))))

    async def login(request: Request) -> Response:
        try:
            form = await _form(request)
        except Refused as exc:
            return HTMLResponse(pages.login_page(exc.text), status_code=exc.status)
        origin = request.headers.get("origin")
        if origin is not None and not origin_allowed(origin, request.headers.get("host", ""), web.origins):
            return HTMLResponse(pages.login_page(f"a login from another site ({origin}) is refused"), status_code=403)
        person, value = await lanes.off_loop(web.sessions.login, form.get("token", ""))
        if person is None:
            return HTMLResponse(pages.login_page(value), status_code=401)
        response = RedirectResponse(_safe_next(form.get("next")), status_code=303)
        response.set_cookie(
            COOKIE,
            value,
            max_age=web.sessions.seconds,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def logout(request: Request) -> Response:
        try:
            form = await _form(request)
        except Refused as exc:
            return HTMLResponse(pages.message_page("Refused", exc.text), status_code=exc.status)
        cookie = request.cookies.get(COOKIE)
        if cookie and not web.sessions.csrf_ok(cookie, form.get("csrf") or request.headers.get("x-csrf-token")):
            return HTMLResponse(
                pages.message_page(
                    "Refused", "the form's CSRF token is missing or stale: reload the page and log out from it"
                ),
                status_code=403,
            )
        await lanes.off_loop(web.sessions.logout, cookie)  # on every process and node, not only here
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def events(request: Request) -> Response:
        viewer = await lanes.off_loop(web.viewer, request)
        if viewer is None:
            return JSONResponse({"error": "log in first"}, status_code=401)
        f = _filters(request)
        cookie = request.cookies.get(COOKIE)

        def still() -> bool:
            """A person with a page open is present; once their session has ended, its stream ends too."""
            if web.sessions.person(cookie) is None:
                return False
            board.agents.seen(viewer.name)
            return True

        return StreamingResponse(
            web.hub.stream((f["type"], f["agent"], f["label"]), still=still if viewer.name else None),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def counts(request: Request) -> Response:
        viewer = await lanes.off_loop(web.viewer, request)
        if viewer is None:
            return JSONResponse({"error": "log in first"}, status_code=401)
        f = _filters(request)
        found = await lanes.off_loop(
            lambda: board.views.counts(task_type=f["type"], agent=f["agent"], label=f["label"])
        )
        return JSONResponse(found)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("not found", status_code=404)
        body = resources.files(__package__).joinpath("static", name).read_bytes()
        # no-cache: the browser asks each time, and the ETag lets it keep what it has (Chart.js is large)
        headers = {"cache-control": "no-cache", "etag": f'"{hashlib.sha256(body).hexdigest()[:20]}"'}
        if request.headers.get("if-none-match") == headers["etag"]:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=STATIC[name], headers=headers)

    async def favicon(request: Request) -> Response:
        body = resources.files(__package__).joinpath("static", "favicon.ico").read_bytes()
        return Response(body, media_type=STATIC["favicon.ico"], headers={"cache-control": "max-age=86400"})

    async def health(request: Request) -> Response:
        """Alive, and nothing about the board: load balancers ask without logging in. A person (the web
        benches) also reads how many live pages this process is streaming to."""
        said: dict = {"status": "ok"}
        cookie = request.cookies.get(COOKIE)
        if cookie and await lanes.off_loop(web.sessions.person, cookie) is not None:
            said["live_pages"] = web.hub.clients
        return JSONResponse(said)

    async def root(request: Request) -> Response:
        return RedirectResponse("/board", status_code=303)

    return [
        Route("/", root),
        Route("/health", health),
        Route("/favicon.ico", favicon),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/board", page(board_view)),
        Route("/board/column/{status}", page(column_view)),
        Route("/board/counts", counts),
        Route("/task/{task_id:int}", page(task_view)),
        Route("/messages", page(messages_view)),
        Route("/agents", page(agents_view)),
        Route("/memory", page(memory_view)),
        Route("/memory/{item_id:int}", page(memory_item_view)),
        Route("/metrics", page(metrics_view)),
        Route("/events", events),
        Route("/tasks", action(create), methods=["POST"]),
        Route("/task/{task_id:int}/decide", action(decide), methods=["POST"]),
        Route("/task/{task_id:int}/message", action(post), methods=["POST"]),
        Route("/task/{task_id:int}/edit", action(edit), methods=["POST"]),
        Route("/static/{name}", static),
    ]


def _safe_next(target: str | None) -> str:
    """Only a path on this board (never another site) after login."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/board"
    return quote(target, safe="/?=&")


class Site:
    """One ASGI app on one port: /mcp to the MCP app (with its lifespan), the rest to the web board,
    every request checked against the allowed Host names first (DNS rebinding), every answer with the
    browser's security headers."""

    def __init__(self, mcp_app, web_app, web: WebBoard):
        self.mcp_app, self.web_app, self.web = mcp_app, web_app, web

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.mcp_app(scope, receive, send)
        path = scope.get("path", "")
        if path == "/mcp" or path.startswith("/mcp/"):
            return await self.mcp_app(scope, receive, send)
        if scope["type"] == "http":
            send = _secured(send)
            host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None)
            if not host_allowed(host, self.web.hosts):
                body = json.dumps(
                    {"error": f"Host {host!r} is not allowed; open the board at http://127.0.0.1:<port>/"}
                ).encode()
                await send(
                    {"type": "http.response.start", "status": 421, "headers": [(b"content-type", b"application/json")]}
                )
                await send({"type": "http.response.body", "body": body})
                return
        return await self.web_app(scope, receive, send)


def _secured(send):
    """`send` that adds SECURITY_HEADERS to the response's start."""

    async def secured(message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
        await send(message)

    return secured
