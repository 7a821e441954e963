"""The web board in a real browser: Playwright drives the OS package `chromium` (never a downloaded
browser). Agents work through MCP clients against the same `hiveboard serve --http` subprocess.

Without chromium these tests skip with one line, unless HIVEBOARD_REQUIRE_BROWSER=1 (set by .ci/run,
which installs it) makes that a failure. With HIVEBOARD_SCREENSHOTS=DIR the seeded-board tests save
the screenshots of README.md and docs/web-board.md there (docs/screenshots).

Every page a test opens is swept as it loads and each time its main part changes (`Swept`): no traceback
and no markdown shown as raw text (a line starting with `**`, `#`, a code fence) outside code blocks.

The browser is slow, so the tests marked `backends("sqlite", "postgresql")` run on both: a person
logging in, the board following cards live (through review), and a person's decisions on a card from
the card's page and from another tab. The rest (page layout, charts, hostile markdown, CSRF in a
browser) render what the board's views return, which tests/server/test_web.py checks on both.
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from conftest import call, http_client, issue_tokens, serve_http, stop_process

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
PlaywrightError = pytest.importorskip("playwright.sync_api").Error
WAIT = 60_000  # ms: a generous ceiling for a loaded machine; the bench measures how fast it really is


def shows(page, selector: str, text: str) -> None:
    """Wait until the element shows this text. Polled from here: a predicate evaluated as a string in the
    page is an eval, which the board's Content-Security-Policy refuses (as it should)."""
    from playwright.sync_api import expect

    expect(page.locator(selector)).to_have_text(text, timeout=WAIT)


def mcp(fn, *args):
    """Run an async MCP step from a sync (Playwright) test, on its own thread and event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, fn, *args).result()


@pytest.fixture
def served(tmp_path: Path, node_env: dict[str, str]):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[review.human_approval]\nlabels = ["needs-sign-off"]\n')
    tokens = issue_tokens(home, node_env, {"coder": None, "tester": None, "lee": "human"})
    proc, url = serve_http(home, env=node_env)
    yield url, url.rsplit("/mcp", 1)[0], tokens
    stop_process(proc)


# runs in every page before its own script: reports what a person should never read on the board, once the
# page has loaded and after each change of its main part (a live update), through the binding `Swept` adds
SWEEP = r"""
(() => {
  const sweep = () => {
    const found = [];
    const walk = document.createTreeWalker(document.body || document.documentElement, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.parentElement && n.parentElement.closest("pre, code, textarea, script, style")) continue;
      for (const line of n.textContent.split("\n")) {
        const t = line.trim();
        if (/^(\*\*|#{1,6} |```|~~~)/.test(t)) found.push("raw markdown: " + t.slice(0, 120));
        if (/Traceback \(most recent call last\)|Internal Server Error/.test(t)) found.push("error: " + t.slice(0, 120));
      }
    }
    if (found.length) window.__hiveboard_swept(location.href, found);
  };
  let later = null;
  addEventListener("load", () => {
    sweep();
    const main = document.getElementById("main");
    if (main) new MutationObserver(() => { clearTimeout(later); later = setTimeout(sweep, 100); })
      .observe(main, { childList: true, subtree: true });
  });
})();
"""


class Swept:
    """The browser, each page it opens swept by SWEEP; `problems` holds what the sweeps found, by page."""

    def __init__(self, chromium):
        self.chromium = chromium
        self.problems: dict[str, set[str]] = {}

    def _found(self, source, url: str, lines: list[str]) -> None:
        self.problems.setdefault(url, set()).update(lines)

    def new_context(self, **options):
        context = self.chromium.new_context(**options)
        context.expose_binding("__hiveboard_swept", self._found)
        context.add_init_script(SWEEP)
        return context

    def new_page(self, **options):
        return self.new_context(**options).new_page()


@pytest.fixture
def browser():
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        swept = Swept(chromium)
        yield swept
        for context in chromium.contexts:  # reports still on their way arrive before the verdict
            for page in context.pages:
                try:
                    page.evaluate("1")
                except PlaywrightError:  # a page without script, or one navigating: nothing more to hear
                    pass
        chromium.close()
        assert not swept.problems, f"pages show a traceback or raw markdown: {swept.problems}"


def unfold(page) -> None:
    """Open every folded part of a card's page, as a person reading all of it would."""
    closed = page.locator("details.fold:not([open]) > summary")
    while closed.count():
        closed.first.click()


def log_in(page, base: str, token: str) -> None:
    page.goto(f"{base}/task/1")  # a page behind the login: it sends the person back there
    page.fill("input[name=token]", token)
    page.click("form button")


def csp_refusals(page) -> list[str]:
    """What the page's Content-Security-Policy refused, as chromium logs it on the console (filled as the
    page runs: assert it is empty at the end)."""
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    return refused


@pytest.mark.backends("sqlite", "postgresql")
def test_cards_move_across_an_open_board_without_reload(served, browser):
    url, base, tokens = served
    context = browser.new_context(viewport={"width": 1500, "height": 900})  # one person: two tabs, one session
    page = context.new_page()
    refused = csp_refusals(page)  # live updates under the pages' Content-Security-Policy
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
    shows(notes, "#count-done", "1")
    shows(notes, "#count-in_progress", "0")

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
    shows(notes, "#count-todo", "1")
    assert notes.query_selector(f"#card-{second['id']}") is None
    assert not refused, f"the Content-Security-Policy refused: {refused}"
    context.close()


@pytest.mark.backends("sqlite", "postgresql")
def test_after_logging_out_the_old_cookie_reads_and_does_nothing(served, browser):
    """Log out, then put the session cookie from before back into a fresh browser (as someone who copied
    it would): the board sends it to the login page, and its actions are refused, nothing written."""
    url, base, tokens = served
    context = browser.new_context()
    page = context.new_page()
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/board")
    page.wait_for_selector("#col-todo")
    csrf = page.get_attribute("form[action='/logout'] input[name=csrf]", "value")
    kept = [c for c in context.cookies() if c["name"] == "hiveboard_session"]
    assert kept, context.cookies()
    page.click("form[action='/logout'] button")
    page.wait_for_selector("input[name=token]")
    context.close()

    again = browser.new_context()
    again.add_cookies(kept)
    stale = again.new_page()
    stale.goto(f"{base}/board")
    assert stale.url.startswith(f"{base}/login") and stale.locator("input[name=token]").count() == 1
    status = stale.evaluate(
        f"fetch('{base}/tasks', {{method: 'POST', body: 'title=x&task_type=code&csrf={csrf}', headers: "
        "{'content-type': 'application/x-www-form-urlencoded'}}).then(r => r.status)"
    )
    assert status == 401
    again.close()

    async def count():
        async with http_client(url, tokens["coder"]) as coder:
            return (await call(coder, "list_tasks"))["total"]

    assert mcp(count) == 0


@pytest.mark.backends("sqlite", "postgresql")
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
    threading.Thread(target=evil.serve_forever, args=(0.02,), daemon=True).start()  # a prompt shutdown()
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


def seed_board(url: str, tokens: dict[str, str]):
    """A board with a card that took two review rounds (a failing test, then the fix), a card waiting on a
    person's sign-off, and work in every column; (the two-round card, the sign-off card)."""
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

    return mcp(seed)


def test_seeded_board_pages_render(served, browser):
    """The card page shows both rounds and the score chart; the metrics page its charts. Saves the
    README screenshots when HIVEBOARD_SCREENSHOTS is set."""
    url, base, tokens = served
    calc, sign = seed_board(url, tokens)
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
    assert "Review round 2: PASS → done · score 10/10 · tests passed (2 rounds)" in page.inner_text("#decision")
    unfold(page)
    text = page.inner_text("main")
    assert "Round 1: FAIL" in text and "Round 2: PASS" in text and "test_add" in text
    page.wait_for_selector(".scores canvas[data-drawn]")
    assert page.locator(".scores table tr").count() == 3  # the score of each round, under its heading
    if shots:
        page.evaluate("window.scrollTo(0, 0)")  # opening the folds scrolled it: the header sits on top again
        page.screenshot(path=str(Path(shots) / "card.png"), full_page=True)
    page.goto(f"{base}/metrics")
    page.wait_for_selector("figure.chart canvas[data-drawn]")
    assert page.locator("figure.chart canvas[data-drawn]").count() == 5
    assert "first-pass rate" in page.inner_text("main")
    if shots:
        page.screenshot(path=str(Path(shots) / "metrics.png"), full_page=True)
    page.goto(f"{base}/agents")
    assert "coder" in page.inner_text("main") and "tester" in page.inner_text("main")
    page.goto(f"{base}/messages")
    assert "token bucket" in page.inner_text("main")


# every page of the board a person reads, with what it must show once loaded (a card's page: unfolded)
PAGES = {
    "board": ("/board", "#col-done"),
    "card": ("/task/{calc}", ".scores canvas[data-drawn]"),
    "decision": ("/task/{sign}", "#decision form.decide"),
    "messages": ("/messages", "ol.thread"),
    "agents": ("/agents", "table.agents"),
    "memory": ("/memory?q=calc", "form.filters"),
    "metrics": ("/metrics", "figure.chart canvas[data-drawn]"),
}
WIDTHS = ((1280, 800), (1024, 768), (390, 844))  # a laptop, a small laptop, a phone
SHOWN = (1280, 390)  # the widths docs/web-board.md shows
# a canvas with some pixel drawn on it (Chart.js draws axes, bars and labels; an empty canvas is all 0)
INKED = "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some(v => v !== 0)"


def test_every_page_fits_from_desktop_to_phone(served, browser):
    """From 1,280 down to 390 px wide no page scrolls sideways (a card's page with every fold open), every nav
    link is on screen, the board's columns scroll inside the board, and the charts are drawn from the board's
    own files (no other site). Saves NAME-1280.png and NAME-390.png for each page when HIVEBOARD_SCREENSHOTS
    is set (a card's page as it opens: folded)."""
    url, base, tokens = served
    calc, sign = seed_board(url, tokens)
    shots = os.environ.get("HIVEBOARD_SCREENSHOTS")
    for width, height in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        refused = csp_refusals(page)  # every page and chart under the Content-Security-Policy
        elsewhere = []
        page.on("request", lambda r: None if r.url.startswith(base) else elsewhere.append(r.url))
        log_in(page, base, tokens["lee"])
        page.wait_for_selector("main")
        for name, (path, ready) in PAGES.items():
            page.goto(base + path.format(calc=calc["id"], sign=sign["id"]))
            if shots and width in SHOWN:  # the page's top 2,000 px: a long thread is more of the same
                if page.locator("body[data-live]").count():  # a live page as a person sees it: connected
                    page.wait_for_selector("body[data-connected='1']", state="attached", timeout=WAIT)
                tall = min(page.evaluate("document.documentElement.scrollHeight"), 2000)
                clip = {"x": 0, "y": 0, "width": width, "height": tall}
                page.screenshot(path=str(Path(shots) / f"{name}-{width}.png"), full_page=True, clip=clip)
            unfold(page)
            page.wait_for_selector(ready, timeout=WAIT)
            where = f"{name} at {width} px"
            overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
            assert overflow <= 1, f"{where} scrolls sideways by {overflow} px"
            links = page.locator("header nav a")
            assert links.count() == 5, where
            for n in range(links.count()):
                box = links.nth(n).bounding_box()
                assert links.nth(n).is_visible() and box and box["x"] >= 0 and box["x"] + box["width"] <= width, (
                    f"{where}: nav link {links.nth(n).inner_text()!r} is off screen ({box})"
                )
            if name == "board":
                board = page.evaluate(
                    "(() => { const b = document.querySelector('.board'); const r = b.getBoundingClientRect();"
                    " return {right: r.right, inner: b.scrollWidth > b.clientWidth}; })()"
                )
                assert board["right"] <= width, where
                assert board["inner"] == (width < 1200), f"{where}: {board}"  # six columns fit at 1,280
            canvases = page.locator("canvas[data-chart]")
            for n in range(canvases.count()):
                canvas = canvases.nth(n)
                assert canvas.get_attribute("data-drawn") == "1" and canvas.evaluate(INKED), f"{where}: chart {n}"
                box = canvas.bounding_box()
                assert box["width"] >= min(300, width - 60) and box["height"] >= 120, f"{where}: chart {n} is {box}"
            if name == "metrics":
                assert canvases.count() == 5
                # each chart's numbers stay on the page as a table (closed once drawn)
                assert page.locator("figure.chart details.data table").count() == 5
                # horizontal charts grow with their rows (set by charts.js: the CSP refuses a style attribute)
                rows = "ps => ps.length > 0 && ps.every(p => p.style.getPropertyValue('--rows') === p.dataset.rows)"
                assert page.eval_on_selector_all(".plot[data-rows]", rows), where
        assert not elsewhere, f"pages fetched from another site: {elsewhere}"
        assert not refused, f"at {width} px the Content-Security-Policy refused: {refused}"
        context.close()


def _escalated(
    url: str, tokens: dict[str, str], reason: str = "ISO 8601 or RFC 2822?", title: str = "Choose a date format"
) -> dict:
    """A card its agent handed to a person (needs_human), no review having run."""

    async def stuck():
        async with http_client(url, tokens["coder"]) as coder:
            made = await call(coder, "create_task", title=title, task_type="code")
            claim = await call(coder, "claim_task", task_id=made["id"])
            await call(
                coder, "update_task", task_id=made["id"], token=claim["token"], status="needs_human", reason=reason
            )
            return made

    return mcp(stuck)


@pytest.mark.backends("sqlite", "postgresql")
def test_an_open_card_page_follows_a_decision_made_elsewhere(served, browser):
    """A person passes a card in one tab; the same card open in another tab shows it done, with who decided,
    without a reload, and keeps what the person was typing there."""
    url, base, tokens = served
    made = _escalated(url, tokens)
    task = f"{base}/task/{made['id']}"
    context = browser.new_context()
    watcher = context.new_page()
    log_in(watcher, base, tokens["lee"])
    watcher.goto(task)
    watcher.wait_for_selector("body[data-connected='1']", timeout=WAIT)
    watcher.evaluate("window.__same_page = true")
    assert "not reviewed yet" in watcher.inner_text("main") and watcher.locator("form.decide").count() == 1
    watcher.click("#fold-thread > summary")
    watcher.fill("form.post textarea[name=content]", "a draft I am still writing")

    deciding = context.new_page()
    deciding.goto(task)
    deciding.fill("form.decide textarea[name=note]", "ISO 8601, always UTC.")
    deciding.once("dialog", lambda d: d.accept())  # Pass asks first
    deciding.click("form.decide button[value=pass]")
    deciding.wait_for_selector(".flash")
    assert "now done" in deciding.inner_text(".flash") and "passed by a person" in deciding.inner_text("main")

    shows(watcher, "main .status", "Done")
    assert watcher.evaluate("window.__same_page") is True  # updated in place
    text = watcher.inner_text("main")
    assert "passed by a person (lee" in text and "not reviewed yet" not in text and "Why it waits" not in text
    assert watcher.locator("form.decide").count() == 0
    assert watcher.input_value("form.post textarea[name=content]") == "a draft I am still writing"
    assert watcher.locator("#fold-thread").get_attribute("open") is not None  # its fold stays as the person left it
    context.close()


def test_a_page_catches_up_on_changes_made_before_it_listened(served, browser):
    """A change committed after a page was rendered but before its live stream started reaches it: the
    stream's first event says the board moved on, and the page reloads its main part."""
    url, base, tokens = served
    made = _escalated(url, tokens)
    page = browser.new_page()
    log_in(page, base, tokens["lee"])
    page.wait_for_selector("main")
    held = []
    page.route("**/events*", lambda route: held.append(route))  # its stream waits until the change is made
    page.goto(f"{base}/task/{made['id']}")
    page.wait_for_load_state("load")
    while not held:
        page.wait_for_timeout(20)
    page.click("#fold-thread > summary")  # open, and kept open by the reload of the page's main part
    page.evaluate("window.__same_page = true")

    async def note():
        async with http_client(url, tokens["coder"]) as coder:
            await call(
                coder, "publish_message", intent="note", task_id=made["id"], content="made while nobody listened"
            )

    mcp(note)
    assert "made while nobody listened" not in page.inner_text("main")
    held[0].continue_()
    page.unroute("**/events*")
    page.wait_for_selector("text=made while nobody listened", timeout=WAIT)
    assert page.evaluate("window.__same_page") is True


def test_markdown_on_a_card_runs_no_script(served, browser):
    """Markdown from an agent shows formatted; a script, an <img onerror> and a javascript: link in it
    stay inert text, and nothing of them runs in the browser."""
    url, base, tokens = served
    payload = (
        "Some **bold** text.\n\n<script>window.__pwned = 'script'; alert('script')</script>\n\n"
        "<img src=x onerror=\"window.__pwned = 'img'; alert('img')\">\n\n"
        "[click me](javascript:window.__pwned='link')\n\n```\nkeep_monospace()\n```\n"
    )

    async def seed():
        async with http_client(url, tokens["coder"]) as coder:
            made = await call(coder, "create_task", title="Hostile markdown", task_type="code", description=payload)
            await call(coder, "publish_message", intent="note", task_id=made["id"], content=payload)
            return made

    made = mcp(seed)
    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/task/{made['id']}")
    unfold(page)
    page.wait_for_selector(".md.desc strong")
    for where in (".md.desc", "ol.thread .md"):
        assert page.inner_text(f"{where} strong") == "bold"
        text = page.inner_text(where)
        assert "<script>" in text and "onerror" in text and "[click me](javascript:" in text  # shown, as text
        font = page.eval_on_selector(f"{where} pre code", "e => getComputedStyle(e).fontFamily")
        assert "mono" in font.lower(), font
    assert page.locator("main script, main img, main a[href^='javascript' i]").count() == 0
    page.locator(".md.desc p", has_text="[click me]").click()  # plain text: nothing to follow
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None and dialogs == []


def _two_rounds_to_a_person(url: str, tokens: dict[str, str]) -> dict:
    """A card needing sign-off whose acceptance test failed in round 1 and passed in round 2, with a diff
    artifact and a hostile file; it waits on a person."""
    tests = {
        "files": [
            {
                "name": "test_calc.py",
                "content": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            }
        ]
    }
    hostile = {"name": 'notes"<b>.html', "kind": "text", "content": "<script>window.__pwned = 1</script>\n"}

    def work(sign: str, timeout: int) -> list[dict]:
        return [
            {"name": "calc.py", "kind": "code", "content": f"def add(a, b):\n    return a {sign} b\n"},
            {
                "name": "settings.diff",
                "kind": "diff",
                "content": f"--- a/s.cfg\n+++ b/s.cfg\n@@ -1 +1 @@\n-t = 1\n+t = {timeout}\n",
            },
            hostile,
        ]

    async def seed():
        async with http_client(url, tokens["coder"]) as coder:
            made = await call(
                coder,
                "create_task",
                title="Implement add",
                task_type="code",
                labels=["needs-sign-off"],
                acceptance_tests=tests,
            )
            claim = await call(coder, "claim_task", task_id=made["id"])
            await call(
                coder, "complete_task", task_id=made["id"], token=claim["token"], output="v1", artifacts=work("-", 5)
            )
            first = await call(coder, "get_review", task_id=made["id"], wait_seconds=240)
            assert first["rounds"][-1]["outcome"] == "in_progress", first
            await call(
                coder, "complete_task", task_id=made["id"], token=claim["token"], output="v2", artifacts=work("+", 9)
            )
            second = await call(coder, "get_review", task_id=made["id"], wait_seconds=240)
            assert second["rounds"][-1]["outcome"] == "needs_human", second
            return made

    return mcp(seed)


def _boxes(versions) -> list[dict]:
    """The boxes of a file's two versions (the one before, the current one), read in one evaluation: the live
    page may replace its main part between two separate reads (a commit in the background), which leaves the
    first element read detached, with no box."""
    return versions.evaluate(
        "v => [...v.querySelectorAll(':scope > .version')].slice(0, 2).map(e => {"
        "const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, width: r.width, height: r.height}; })"
    )


@pytest.mark.backends("sqlite", "postgresql")
def test_the_card_page_shows_the_work_beside_the_round_before_and_pass_needs_confirming(served, browser):
    """At the approval gate a person reads round 2's files, each changed one beside its round 1 version (side
    by side on a wide screen, the current one first on a phone), a diff artifact as a marked diff with line
    numbers, and the test output; nothing in a hostile file runs. Pass asks first, naming the round: without
    script on a confirmation page, with script in a dialog; refused or dismissed, nothing is approved."""
    url, base, tokens = served
    made = _two_rounds_to_a_person(url, tokens)
    task = f"{base}/task/{made['id']}"
    named = f"round 2 of card #{made['id']}, 3 files"

    wide = browser.new_context(viewport={"width": 1500, "height": 900})
    page = wide.new_page()
    refused = csp_refusals(page)
    log_in(page, base, tokens["lee"])
    page.goto(task)
    page.click("#decision a[href='#files']")  # "read the files": its fold opens
    assert page.locator("#fold-work").get_attribute("open") is not None
    unfold(page)
    calc = page.locator("#files #file-1")  # the hand-in's files in its order: calc.py first
    assert calc.locator("> h4").inner_text().split() == "calc.py code changed since round 1".split()
    before, now = calc.locator("> .versions > .version").nth(0), calc.locator("> .versions > .version").nth(1)
    assert before.locator(".vhead").inner_text() == "round 1" and now.locator(".vhead").inner_text() == "round 2"
    assert "a - b" in before.inner_text() and "a + b" in now.inner_text()
    left, right = _boxes(calc.locator("> .versions"))
    assert left["x"] + left["width"] <= right["x"] and abs(left["y"] - right["y"]) < 2, (left, right)  # side by side
    keyword = now.locator(".code .k", has_text="def")
    assert keyword.count() == 1 and keyword.evaluate("e => getComputedStyle(e).color") != now.locator(
        ".code .l"
    ).first.evaluate("e => getComputedStyle(e).color")  # highlighted
    added = page.locator("#files #file-2 > .versions > .version").nth(1).locator(".diff .l.add")
    assert added.locator(".no").nth(1).inner_text() == "1" and "t = 9" in added.inner_text()
    assert added.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert "passed" in page.inner_text("#tests-run") and "test_add" in page.inner_text("#acceptance-tests")
    assert "<script>window.__pwned" in page.inner_text("main")  # the hostile file, shown as text
    assert page.evaluate("window.__pwned") is None
    assert f"Pass approves {named}" in page.inner_text("form.decide")
    shots = os.environ.get("HIVEBOARD_SCREENSHOTS")
    if shots:
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(Path(shots) / "approval.png"), full_page=True)

    # with script: a dialog names what is approved; dismissed, nothing is approved
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("form.decide button[value=pass]")
    page.wait_for_timeout(300)
    assert asked == [f"Pass {named}? The card moves to Done."] and page.url == f"{task}#files"
    assert page.inner_text("main .status") == "Needs a human"

    # without script: the board answers with a confirmation page; going back approves nothing
    plain = browser.new_context(java_script_enabled=False)
    nojs = plain.new_page()
    log_in(nojs, base, tokens["lee"])
    nojs.goto(task)
    nojs.click("form.decide button[value=pass]")
    assert nojs.inner_text("main h1") == f"Pass {named}?"
    if shots:
        nojs.screenshot(path=str(Path(shots) / "approval-confirm.png"), full_page=True)
    assert [nojs.locator("ul.files li").nth(n).inner_text() for n in range(3)] == [
        "calc.py",
        "settings.diff",
        'notes"<b>.html',
    ]
    nojs.click("text=No, back to the card")
    assert nojs.inner_text("main .status") == "Needs a human"

    # the phone: the current version above the one before it
    phone = browser.new_context(viewport={"width": 390, "height": 844})
    small = phone.new_page()
    log_in(small, base, tokens["lee"])
    small.goto(task)
    unfold(small)
    before_box, now_box = _boxes(small.locator("#files #file-1 > .versions"))
    assert now_box["y"] < before_box["y"]
    assert small.evaluate("document.documentElement.scrollWidth - innerWidth") <= 1

    # the confirmation page's own button passes the round it named
    nojs.goto(task)
    nojs.click("form.decide button[value=pass]")
    nojs.click("form.confirm button")
    assert "now done" in nojs.inner_text(".flash")
    page.reload()
    assert page.inner_text("main .status") == "Done" and page.locator("form.decide").count() == 0
    assert not refused, f"the Content-Security-Policy refused: {refused}"
    for context in (wide, plain, phone):
        context.close()


def test_a_dialog_confirmed_pass_approves_the_card(served, browser):
    url, base, tokens = served
    made = _escalated(url, tokens)
    page = browser.new_page()
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/task/{made['id']}")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("form.decide button[value=pass]")
    page.wait_for_selector(".flash")
    assert asked == [f"Pass card #{made['id']} as it stands, nothing handed in? The card moves to Done."]
    assert "now done" in page.inner_text(".flash")


@pytest.mark.parametrize("width", [1200, 360])
def test_the_login_pages_command_is_one_line_on_a_desktop_and_a_phone(browser, width):
    from hiveboard.server.web.pages import login_page

    css = (Path(__file__).resolve().parents[2] / "server" / "web" / "static" / "app.css").read_text()
    html = login_page().replace('<link rel="stylesheet" href="/static/app.css">', f"<style>{css}</style>")
    page = browser.new_page(viewport={"width": width, "height": 800})
    page.set_content(html)
    command = page.locator("code", has_text="hiveboard agent add")
    assert command.inner_text() == "hiveboard agent add YOUR-NAME --role human"
    lines = command.evaluate(
        "e => { const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length; }"
    )
    assert lines == 1
    page.close()


# an agent's needs-human reason with pytest's output pasted in, as agents do
PYTEST_REASON = """Which rounding does the product want? The card's test expects 2.5 to round up:

    def test_round_half():
>       assert round_half(2.5) == 3
E       assert 2 == 3
E        +  where 2 = round_half(2.5)

test_money.py:7: AssertionError
=========================== short test summary info ============================
FAILED test_money.py::test_round_half - assert 2 == 3
Python's round() gives **2** (banker's rounding); say which one to keep."""


def _board_with_a_person_needed(url: str, tokens: dict[str, str]) -> dict:
    """A card in each of the first columns and one that needs a person, its reason holding pytest's output."""

    async def seed():
        async with http_client(url, tokens["coder"]) as coder:
            for title in ("Add rate limiting to the API", "Write the onboarding guide", "Fuzz the message parser"):
                await call(coder, "create_task", title=title, task_type="code")
            await call(coder, "claim_task")

    mcp(seed)
    return _escalated(url, tokens, PYTEST_REASON, "Round half-cents on invoices")


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_every_column_is_in_sight_and_needs_a_human_one_tap_away(served, browser, width, height):
    """At 1,280 px all six columns fit side by side. On a phone one column shows at a time with the next one
    peeking in, and a switcher above lists every column with its count: "Needs a human" is always in sight,
    marked when a card waits there, and a tap brings its column into view (the page never scrolls sideways)."""
    url, base, tokens = served
    made = _board_with_a_person_needed(url, tokens)
    page = browser.new_page(viewport={"width": width, "height": height})
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/board")
    page.wait_for_selector(f"#col-needs_human #card-{made['id']}")
    page.wait_for_selector("body[data-connected='1']", timeout=WAIT)
    boxes = {c.get_attribute("data-status"): c.bounding_box() for c in page.locator(".board > .column").all()}
    assert list(boxes) == ["todo", "in_progress", "review", "done", "blocked", "needs_human"]
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 1
    if width >= 1280:
        for status, box in boxes.items():
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"{status} is cut off at {width} px: {box}"
        assert not page.locator("nav.switcher").is_visible()  # nothing to switch to: all are in sight
        return
    # the phone: one column, the next peeking in at the edge (a swipe's cue)
    first, second = boxes["todo"], boxes["in_progress"]
    assert first["x"] >= 0 and first["x"] + first["width"] <= width and first["width"] >= 0.75 * width
    assert second["x"] < width - 16, f"the next column does not show at the edge: {second}"
    tabs = page.locator("nav.switcher a")
    assert [t.get_attribute("data-status") for t in tabs.all()] == list(boxes)
    for tab in tabs.all():  # every column's name and count is on screen
        box = tab.bounding_box()
        assert tab.is_visible() and box["x"] >= 0 and box["x"] + box["width"] <= width, tab.inner_text()
    needed = page.locator("nav.switcher a[data-status=needs_human]")
    assert needed.inner_text().split() == ["Needs", "a", "human", "1"] and "urgent" in needed.get_attribute("class")
    assert needed.bounding_box()["y"] + needed.bounding_box()["height"] <= height  # on the first screen
    needed.click()
    card = page.locator(f"#card-{made['id']}")

    def in_view() -> bool:
        box = card.bounding_box()
        return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width

    for _ in range(50):  # the board scrolls smoothly: wait for it to arrive
        if in_view():
            break
        page.wait_for_timeout(100)
    assert in_view(), card.bounding_box()
    assert needed.get_attribute("aria-current") == "true"
    assert "Which rounding does the product want?" in card.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 1


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_a_needs_human_card_opens_with_the_decision_and_its_test_output_verbatim(served, browser, width, height):
    """A card an agent handed to a person with pytest's output in its reason: its page opens with one block
    (why it waits, the review's word, the choices) on the first screen; the pytest lines in the reason are
    preformatted as pytest printed them (no `>` line turned into a quote swallowing the next); the prose
    around them is still markdown; everything an engineer reads is folded below."""
    url, base, tokens = served
    made = _escalated(url, tokens, PYTEST_REASON, "Round half-cents on invoices")
    page = browser.new_page(viewport={"width": width, "height": height})
    log_in(page, base, tokens["lee"])
    page.goto(f"{base}/task/{made['id']}")
    reason = page.locator("main .reason")
    assert reason.locator("blockquote, h1, h2, hr").count() == 0, reason.inner_html()
    printed = reason.locator("pre")
    assert printed.count() == 1
    text = printed.inner_text()
    assert ">       assert round_half(2.5) == 3\nE       assert 2 == 3\nE        +  where 2 = round_half(2.5)" in text
    assert "=" * 27 + " short test summary info " + "=" * 28 in text
    assert "FAILED test_money.py::test_round_half - assert 2 == 3" in text
    assert reason.locator("strong").inner_text() == "2"  # the agent's own words: markdown
    shots = os.environ.get("HIVEBOARD_SCREENSHOTS")
    if shots:  # the first screen, as the person opening the card sees it
        page.wait_for_selector("body[data-connected='1']", state="attached", timeout=WAIT)
        page.screenshot(path=str(Path(shots) / f"needs-human-{width}.png"))

    decision = page.locator("main > section.decision")
    assert decision.count() == 1 and decision.locator(".reason").count() == 1
    assert decision.locator("form.decide button[value=pass]").count() == 1
    assert "Review: not reviewed yet" in decision.locator("p.verdict").inner_text()
    top = decision.bounding_box()
    assert top["y"] < height / 3, top  # it opens the page: only the title and its tags above it
    button = decision.locator("form.decide button[value=send_back]").bounding_box()
    if width >= 1280:  # a laptop shows the whole decision, its buttons too, without scrolling
        assert button["y"] + button["height"] <= height, button
    folds = page.locator("main > details.fold")
    assert folds.count() >= 3
    for n in range(folds.count()):
        fold = folds.nth(n)
        assert fold.get_attribute("open") is None, fold.inner_text()
        assert fold.bounding_box()["y"] > top["y"] + top["height"]
    assert not page.locator("#fold-history table.history").is_visible()
    page.click("#fold-history > summary")
    assert page.locator("#fold-history table.history").is_visible()
    assert "needs_human" in page.inner_text("#fold-history")


def test_the_sweep_reports_raw_markdown_and_tracebacks_outside_code(browser):
    """The check every page of these tests gets (SWEEP): markdown marks and a traceback shown as text are
    reported, the same lines inside a code block are not."""
    page = browser.new_page()
    shown = (
        '<main id="main"><p>**Fix** this first</p><p>## Plan</p><pre>```\n## a comment\n**kwargs</pre>'
        "<div>Traceback (most recent call last):</div><code>Traceback (most recent call last):</code></main>"
    )
    page.route("http://sweep.test/", lambda route: route.fulfill(body=shown, content_type="text/html"))
    page.goto("http://sweep.test/")
    page.evaluate("1")  # the report, made on load, has arrived
    found = browser.problems.pop("http://sweep.test/", set())
    assert found == {
        "raw markdown: **Fix** this first",
        "raw markdown: ## Plan",
        "error: Traceback (most recent call last):",
    }
