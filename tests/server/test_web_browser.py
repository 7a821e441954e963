"""The web board in a real browser: Playwright drives the OS package `chromium` (never a downloaded
browser). Agents work through MCP clients against the same `hiveboard serve --http` subprocess.

Without chromium these tests skip with one line, unless HIVEBOARD_REQUIRE_BROWSER=1 (set by .ci/run,
which installs it) makes that a failure. With HIVEBOARD_SCREENSHOTS=DIR the seeded-board test saves
the README's screenshots there.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from conftest import agent_token, call, hiveboard_cmd, http_client, serve_http, stop_process

CHROMIUM = next(
    (
        p
        for p in (os.environ.get("HIVEBOARD_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"))
        if p
    ),
    None,
)
if CHROMIUM is None:
    if os.environ.get("HIVEBOARD_REQUIRE_BROWSER") == "1":
        raise RuntimeError("HIVEBOARD_REQUIRE_BROWSER=1 but no chromium: apt-get install chromium")
    pytest.skip("the browser tests need the OS package chromium (apt-get install chromium)", allow_module_level=True)

sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
WAIT = 60_000  # ms: a generous ceiling for a loaded machine; the bench measures how fast it really is


def mcp(fn, *args):
    """Run an async MCP step from a sync (Playwright) test, on its own thread and event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn, *args).result()


@pytest.fixture
def served(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[review.human_approval]\nlabels = ["needs-sign-off"]\n')
    tokens = {name: agent_token(home, name) for name in ("coder", "tester")}
    tokens["lee"] = subprocess.run(
        hiveboard_cmd("--home", str(home), "agent", "add", "lee", "--role", "human"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    proc, url = serve_http(home)
    yield url, url.rsplit("/mcp", 1)[0], tokens
    stop_process(proc)


@pytest.fixture
def browser():
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def log_in(page, base: str, token: str) -> None:
    page.goto(f"{base}/task/1")  # a page behind the login: it sends the person back there
    page.fill("input[name=token]", token)
    page.click("form button")


def test_cards_move_across_an_open_board_without_reload(served, browser):
    url, base, tokens = served
    context = browser.new_context(viewport={"width": 1500, "height": 900})  # one person: two tabs, one session
    page = context.new_page()
    page.goto(f"{base}/login")
    page.fill("input[name=token]", tokens["lee"])
    page.click("form button")
    page.wait_for_selector("#col-todo")
    page.wait_for_selector("body[data-connected='1']", timeout=WAIT)
    page.evaluate("window.__same_page = true")
    assert [page.inner_text(f"#count-{s}") for s in ("todo", "in_progress", "review", "done")] == ["0"] * 4
    notes = context.new_page()  # the same person's board, filtered to one task type
    notes.goto(f"{base}/board?type=notes")
    notes.wait_for_selector("body[data-connected='1']", timeout=WAIT)

    async def create():
        async with http_client(url, tokens["coder"]) as coder:
            return await call(coder, "create_task", title="Ship the <i>parser</i>", task_type="notes")

    card = mcp(create)
    page.wait_for_selector(f"#col-todo #card-{card['id']}", timeout=WAIT)
    assert "Ship the <i>parser</i>" in page.inner_text(f"#card-{card['id']} .title")  # shown as text
    assert page.inner_text("#count-todo") == "1"

    async def claim():
        async with http_client(url, tokens["coder"]) as coder:
            return await call(coder, "claim_task", task_id=card["id"])

    token = mcp(claim)["token"]
    page.wait_for_selector(f"#col-in_progress #card-{card['id']}", timeout=WAIT)
    assert "@coder" in page.inner_text(f"#card-{card['id']}") and "lease" in page.inner_text(f"#card-{card['id']}")
    assert page.inner_text("#count-todo") == "0"

    async def complete():
        async with http_client(url, tokens["coder"]) as coder:
            await call(coder, "complete_task", task_id=card["id"], token=token, output="done: parser shipped")

    mcp(complete)
    page.wait_for_selector(f"#col-done #card-{card['id']}", timeout=WAIT)  # through review, by the server's worker
    assert page.evaluate("window.__same_page") is True  # no reload happened
    assert page.inner_text("#count-done") == "1" and page.inner_text("#count-in_progress") == "0"
    # the filtered page moved the card too, and its counts came pushed for its filter
    notes.wait_for_selector(f"#col-done #card-{card['id']}", timeout=WAIT)
    notes.wait_for_function(
        "document.getElementById('count-done').textContent === '1' && "
        "document.getElementById('count-in_progress').textContent === '0'",
        timeout=WAIT,
    )

    async def other():
        async with http_client(url, tokens["tester"]) as tester:
            return await call(tester, "create_task", title="Not a note", task_type="code")

    second = mcp(other)
    page.wait_for_selector(f"#col-todo #card-{second['id']}", timeout=WAIT)
    assert page.inner_text("#count-todo") == "1"

    async def note():
        async with http_client(url, tokens["tester"]) as tester:
            return await call(tester, "create_task", title="A note after it", task_type="notes")

    third = mcp(note)  # once the filtered tab shows this one, it has had the update with the code card too
    notes.wait_for_selector(f"#col-todo #card-{third['id']}", timeout=WAIT)
    notes.wait_for_function("document.getElementById('count-todo').textContent === '1'", timeout=WAIT)
    assert notes.query_selector(f"#card-{second['id']}") is None
    context.close()


def test_a_person_resolves_needs_human_and_the_author_is_told(served, browser):
    url, base, tokens = served

    async def stuck():
        async with http_client(url, tokens["coder"]) as coder:
            made = await call(coder, "create_task", title="Choose a date format", task_type="code")
            claim = await call(coder, "claim_task", task_id=made["id"])
            await call(
                coder,
                "update_task",
                task_id=made["id"],
                token=claim["token"],
                status="needs_human",
                reason="ISO 8601 or RFC 2822?",
            )
            await call(coder, "get_messages")
            return made

    made = mcp(stuck)
    page = browser.new_page()
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/task/{made['id']}")
    assert "ISO 8601 or RFC 2822?" in page.inner_text("main")
    page.fill("form.decide textarea[name=note]", "ISO 8601, always UTC.")
    page.click("form.decide button[value=send_back]")
    page.wait_for_selector(".flash")
    assert "now todo" in page.inner_text(".flash")

    async def inbox():
        async with http_client(url, tokens["coder"]) as coder:
            return await call(coder, "get_messages")

    messages = mcp(inbox)["messages"]
    assert any(m["sender"] == "lee" and "ISO 8601, always UTC." in m["content"] for m in messages), messages


def test_actions_from_another_site_or_logged_out_are_refused(served, browser):
    url, base, tokens = served
    evil_page = (
        f'<form id="f" method="post" action="{base}/tasks"><input name="title" value="planted">'
        '<input name="task_type" value="code"></form><script>document.getElementById("f").submit()</script>'
    )

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(evil_page.encode())

        def log_message(self, *args):
            pass

    evil = http.server.HTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        context = browser.new_context()
        page = context.new_page()
        log_in(page, base, tokens["lee"])
        page.wait_for_selector("main")
        # the logged-in person visits another local site whose page posts to the board
        with page.expect_response(f"{base}/tasks") as answer:
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert answer.value.status in (401, 403)
        # a logged-out browser posting to an action
        anon = browser.new_page()
        anon.goto(f"{base}/login")
        status = anon.evaluate(
            f"fetch('{base}/tasks', {{method: 'POST', body: 'title=x&task_type=code', headers: "
            "{'content-type': 'application/x-www-form-urlencoded'}}).then(r => r.status)"
        )
        assert status == 401
        # logged in, same origin, but no CSRF token
        status = page.evaluate(
            f"fetch('{base}/tasks', {{method: 'POST', body: 'title=x&task_type=code', headers: "
            "{'content-type': 'application/x-www-form-urlencoded'}}).then(r => r.status)"
        )
        assert status == 403
    finally:
        evil.shutdown()

    async def count():
        async with http_client(url, tokens["coder"]) as coder:
            return (await call(coder, "list_tasks"))["total"]

    assert mcp(count) == 0


def test_seeded_board_pages_render(served, browser):
    """A board with a card that took two review rounds (a failing test, then the fix), a card waiting on a
    person's sign-off, and work in every column; the card page shows both rounds and the score chart;
    the metrics page its charts. Saves the README screenshots when HIVEBOARD_SCREENSHOTS is set."""
    url, base, tokens = served
    buggy = "def add(a, b):\n    return a - b\n"
    fixed = "def add(a, b):\n    return a + b\n"
    tests = {
        "files": [
            {
                "name": "test_calc.py",
                "content": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            }
        ],
        "commands": [],
    }

    async def seed():
        async with http_client(url, tokens["coder"]) as coder, http_client(url, tokens["tester"]) as tester:
            for n, (title, kind, prio) in enumerate(
                [
                    ("Add rate limiting to the API", "code", "high"),
                    ("Write the onboarding guide", "docs", "medium"),
                    ("Fuzz the message parser", "test", "critical"),
                    ("Profile the cold start", "perf", "low"),
                    ("Split the settings page", "design", "medium"),
                ]
            ):
                await call(
                    coder,
                    "create_task",
                    title=title,
                    task_type=kind,
                    priority=prio,
                    labels=["api"] if n % 2 == 0 else [],
                )
            calc = await call(
                coder,
                "create_task",
                title="Implement calc.add",
                task_type="code",
                acceptance_tests=tests,
                labels=["calc"],
            )
            claim = await call(tester, "claim_task", task_id=calc["id"])
            await call(
                tester,
                "complete_task",
                task_id=calc["id"],
                token=claim["token"],
                output="add implemented",
                artifacts=[{"name": "calc.py", "kind": "code", "content": buggy}],
            )
            first = await call(tester, "get_review", task_id=calc["id"], wait_seconds=240)
            assert first["status"] == "in_progress", first
            await call(
                tester,
                "complete_task",
                task_id=calc["id"],
                token=claim["token"],
                output="fixed the sign",
                artifacts=[{"name": "calc.py", "kind": "code", "content": fixed}],
            )
            second = await call(tester, "get_review", task_id=calc["id"], wait_seconds=240)
            assert second["status"] == "done", second
            sign = await call(
                coder, "create_task", title="Release notes for 1.2", task_type="notes", labels=["needs-sign-off"]
            )
            claim = await call(coder, "claim_task", task_id=sign["id"])
            await call(coder, "complete_task", task_id=sign["id"], token=claim["token"], output="1.2: faster search")
            await call(coder, "get_review", task_id=sign["id"], wait_seconds=240)
            busy = await call(coder, "claim_task")
            blocked = await call(tester, "claim_task")
            await call(
                tester,
                "update_task",
                task_id=blocked["task"]["id"],
                token=blocked["token"],
                status="blocked",
                reason="waits on the staging database",
            )
            await call(
                coder,
                "publish_message",
                intent="plan",
                task_id=busy["task"]["id"],
                content="Starting with the token bucket; ping me if you touch the middleware.",
            )
            return calc, sign

    calc, sign = mcp(seed)
    shots = os.environ.get("HIVEBOARD_SCREENSHOTS")
    page = browser.new_page(viewport={"width": 1500, "height": 820})
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/board")
    page.wait_for_selector(f"#col-done #card-{calc['id']}")
    page.wait_for_selector(f"#col-needs_human #card-{sign['id']}")
    assert "round 2" in page.inner_text(f"#card-{calc['id']}")
    if shots:
        page.screenshot(path=str(Path(shots) / "board.png"))
    page.goto(f"{base}/task/{calc['id']}")
    text = page.inner_text("main")
    assert "Round 1: FAIL" in text and "Round 2: PASS" in text and "test_add" in text
    assert page.locator("svg.spark circle").count() == 2  # the score of each round
    if shots:
        page.screenshot(path=str(Path(shots) / "card.png"), full_page=True)
    page.goto(f"{base}/metrics")
    assert page.locator("svg.chart").count() >= 4
    assert "first-pass rate" in page.inner_text("main")
    if shots:
        page.screenshot(path=str(Path(shots) / "metrics.png"), full_page=True)
    page.goto(f"{base}/agents")
    assert "coder" in page.inner_text("main") and "tester" in page.inner_text("main")
    page.goto(f"{base}/messages")
    assert "token bucket" in page.inner_text("main")
