"""The board's MCP App view in Chromium, embedded by the ext-apps SDK's own host bridge (AppBridge, npm
@modelcontextprotocol/ext-apps) with the MCP TypeScript SDK's client, against a real `hiveboard serve --http`:
the harness in tests/server/apps_host/ (package.json and package-lock.json; `.ci/run` runs `npm ci` and its
bundling step). Playwright drives the OS package chromium and serves the harness's two files at a path of the
server's own origin (the MCP endpoint then needs no cross-origin allowance).

Without chromium (test_web_browser's rule) or without the built harness the test skips with the command that
makes it, unless HIVEBOARD_REQUIRE_BROWSER=1 (set by .ci/run), which makes either a failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import call, http_client, serve_http, stop_process
from test_web_browser import CHROMIUM, WAIT, mcp

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

HOST = Path(__file__).with_name("apps_host")
BUNDLE = HOST / "dist" / "host.js"
WIRE = json.loads(Path(__file__).with_name("app_wire.json").read_text(encoding="utf-8"))
if not BUNDLE.exists():  # (without chromium, test_web_browser skips this module, or fails it where required)
    why = f"the apps host harness is not built: cd {HOST} && npm ci && npm run build (.ci/run does)"
    if os.environ.get("HIVEBOARD_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"HIVEBOARD_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why, allow_module_level=True)

sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
pytestmark = pytest.mark.backends("sqlite", "postgresql")
CARDS = 200


async def register(url: str, name: str) -> str:
    async with http_client(url) as client:
        return (await call(client, "whoami", name=name))["token"]


@pytest.fixture
def served(tmp_path: Path, node_env: dict[str, str]):
    home = tmp_path / "home"
    home.mkdir()
    proc, url = serve_http(home, env=node_env)
    board = Board(Store(node_env.get("HIVEBOARD_DB") or str(home / "hiveboard.db")))
    yield url, board
    board.store.close()
    stop_process(proc)


def test_the_view_renders_200_cards_through_appbridge_and_follows_a_claim_live(served):
    url, board = served
    base = url.rsplit("/mcp", 1)[0]
    ids = [board.create("lead", NewTask(title=f"Card {n} <b>not bold</b>", priority="medium")).id for n in range(CARDS)]
    viewer, coder = mcp(register, url, "viewer"), mcp(register, url, "coder")

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 900})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            files = {"/apps-host/index.html": HOST / "index.html", "/apps-host/dist/host.js": BUNDLE}

            def harness(route):
                path = "/" + route.request.url.split("/", 3)[3].split("?")[0]
                kind = "text/html" if path.endswith(".html") else "text/javascript"
                route.fulfill(status=200, body=files[path].read_bytes(), headers={"content-type": kind})

            page.route(f"{base}/apps-host/**", harness)
            page.goto(f"{base}/apps-host/index.html")
            page.wait_for_function("typeof window.startHost === 'function'", timeout=WAIT)
            opened = page.evaluate(
                "(o) => window.startHost(o)", {"mcpUrl": url, "token": viewer, "tool": "get_board", "args": {}}
            )
            assert opened["uri"] == "ui://hiveboard/board" and opened["mimeType"] == "text/html;profile=mcp-app"

            view = page.frame_locator("#view")
            todo = view.locator("#col-todo article.c")
            todo.nth(CARDS - 1).wait_for(timeout=WAIT)
            assert todo.count() == CARDS
            assert view.locator("#count-todo").inner_text() == str(CARDS)
            first = view.locator(f"#card-{ids[0]} .t")
            assert first.inner_text() == f"#{ids[0]} Card 0 <b>not bold</b>"  # text, not markup
            view.locator("body[data-connected='1']").wait_for(timeout=WAIT)

            moved = ids[57]

            async def claim():
                async with http_client(url, coder) as client:
                    return await call(client, "claim_task", task_id=moved)

            assert mcp(claim)["claimed"]
            view.locator(f"#col-in_progress #card-{moved}").wait_for(timeout=WAIT)  # moved, no reload
            assert "coder" in view.locator(f"#card-{moved} .m").first.inner_text()
            assert view.locator(f"#col-todo #card-{moved}").count() == 0
            assert view.locator("#count-todo").inner_text() == str(CARDS - 1)

            # get_task opens the same view on one card, which follows the board too
            page.evaluate(
                "(o) => window.startHost(o)",
                {"mcpUrl": url, "token": viewer, "tool": "get_task", "args": {"task_id": moved}, "frameId": "card"},
            )
            card = page.frame_locator("#card")
            card.locator(f"#card[data-id='{moved}'][data-status='in_progress']").wait_for(timeout=WAIT)
            assert card.locator("#card-title").inner_text() == f"#{moved} Card 57 <b>not bold</b>"
            assert card.locator("#card-meta").inner_text().startswith("In progress · coder")
            assert "focus" in card.locator(f"#col-in_progress #card-{moved}").get_attribute("class")

            log = page.evaluate("window.hostLog")
            assert problems == [], problems  # no CSP refusal, no script error in host or view
        finally:
            chromium.close()

    # the messages the view exchanged with the SDK's bridge are the ones app_wire.json keeps
    sent = [m["message"] for m in log if m["direction"] == "view->host" and "method" in m["message"]]
    methods = {m["method"] for m in sent}
    assert {"ui/initialize", "ui/notifications/initialized", "tools/call"} <= methods <= set(WIRE["view_sends"])
    for message in sent:
        assert set(message.get("params") or {}) <= set(WIRE["view_sends"][message["method"]]), message
    calls = {m["params"]["name"] for m in sent if m["method"] == "tools/call"}
    assert calls == {"board_view"}
    to_view = {m["message"].get("method") for m in log if m["direction"] == "host->view"} - {None}
    assert {"ui/notifications/tool-input", "ui/notifications/tool-result"} <= to_view
