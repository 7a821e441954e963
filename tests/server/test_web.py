"""The web board over real HTTP (a `hiveboard serve --http` subprocess): access, CSRF, Origin, Host,
hostile text, a person's decisions through the state machine, human approval, the pool's privacy,
live events across server processes, the wall-screen mode. Agents act through MCP clients."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from conftest import agent_token, call, call_error, hiveboard_cmd, http_client, serve_http, stop_process

pytestmark = pytest.mark.anyio


def _base(mcp_url: str) -> str:
    return mcp_url.rsplit("/mcp", 1)[0]


def login(base: str, token: str) -> tuple[httpx.Client, str]:
    """A person's browser-like session: logged in, and the CSRF token its pages carry."""
    web = httpx.Client(base_url=base, timeout=60, follow_redirects=False)
    r = web.post("/login", data={"token": token, "next": "/board"})
    assert r.status_code == 303, r.text
    page = web.get("/board")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    return web, csrf


@pytest.fixture
def site(tmp_path: Path):
    """A served board with a person (human), a lead, and two coder agents."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[review.human_approval]\ntask_types = ["docs"]\n')
    people = {name: agent_token(home, name) for name in ("ann", "coder", "coder2")}
    out = subprocess.run(
        hiveboard_cmd("--home", str(home), "agent", "add", "ann", "--role", "human"),
        capture_output=True,
        text=True,
        check=True,
    )
    people["ann"] = out.stdout.strip()
    proc, url = serve_http(home)
    yield home, url, people
    stop_process(proc)


async def test_pages_and_actions_need_a_person(site):
    home, url, people = site
    base = _base(url)
    anon = httpx.Client(base_url=base, timeout=60)
    r = anon.get("/board", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
    r = anon.post("/tasks", data={"title": "sneaky", "task_type": "code"})
    assert r.status_code == 401 and "log in first" in r.text
    assert anon.get("/events").status_code == 401
    assert anon.get("/health").json()["ok"] is True

    # an agent's token is not a person's
    r = anon.post("/login", data={"token": people["coder"]})
    assert r.status_code == 401 and "for people" in r.text and "cookie" not in {k.lower() for k in r.headers}
    r = anon.post("/login", data={"token": "hb_nonsense"})
    assert r.status_code == 401 and "belongs to no agent" in r.text

    r = anon.post("/login", data={"token": people["ann"], "next": "//evil.example/"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/board"  # never to another site
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and people["ann"].lower() not in cookie

    web, csrf = login(base, people["ann"])
    # no CSRF token, a wrong one, a foreign Origin: refused, nothing written
    assert web.post("/tasks", data={"title": "no csrf", "task_type": "code"}).status_code == 403
    assert web.post("/tasks", data={"title": "bad csrf", "task_type": "code", "csrf": "x" * 40}).status_code == 403
    r = web.post(
        "/tasks", data={"title": "foreign", "task_type": "code", "csrf": csrf}, headers={"origin": "http://127.0.0.1:1"}
    )
    assert r.status_code == 403 and "another site" in r.text
    r = web.post("/tasks", data={"title": "nul\x00title", "task_type": "code", "csrf": csrf})
    assert r.status_code == 400 and "NUL" in r.text
    r = web.post("/tasks", data={"title": "bad priority", "task_type": "code", "priority": "urgent", "csrf": csrf})
    assert r.status_code == 400 and "priority" in r.text
    # a foreign Host (DNS rebinding) is refused before anything else
    assert web.get("/board", headers={"host": "evil.example:80"}).status_code == 421

    async with http_client(url, people["coder"]) as agent:
        assert (await call(agent, "list_tasks"))["total"] == 0  # nothing refused above was written

        r = web.post(
            "/tasks",
            data={
                "title": "Write the changelog",
                "task_type": "code",
                "priority": "high",
                "labels": "release, docs",
                "criteria": "lists every fix\nhas a date",
                "csrf": csrf,
                "description": "<script>alert(1)</script>",
            },
            headers={"origin": base},
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/task/")
        listed = await call(agent, "list_tasks")
        assert listed["total"] == 1
        card = listed["tasks"][0]
        assert card["priority"] == "high" and card["labels"] == ["release", "docs"]
        got = await call(agent, "get_task", task_id=card["id"])
        assert got["created_by"] == "ann" and got["acceptance_criteria"] == ["lists every fix", "has a date"]
        page = web.get(f"/task/{card['id']}").text
        assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page

    # log out needs the CSRF token too; afterwards the session is gone
    assert web.post("/logout", data={}).status_code == 403
    assert web.post("/logout", data={"csrf": csrf}).status_code == 303
    web.cookies.clear()
    assert web.get("/board", follow_redirects=False).status_code == 303


async def test_a_person_resolves_needs_human_and_the_author_hears(site):
    home, url, people = site
    base = _base(url)
    web, csrf = login(base, people["ann"])
    async with http_client(url, people["coder"]) as coder, http_client(url, people["coder2"]) as coder2:
        made = await call(coder, "create_task", title="Pick the API version", task_type="code")
        claim = await call(coder, "claim_task", task_id=made["id"])
        await call(
            coder, "update_task", task_id=made["id"], token=claim["token"], status="needs_human", reason="v1 or v2?"
        )
        await call(coder, "get_messages")  # read what came before

        # an agent cannot decide for a person; a reason is needed to send back
        r = web.post(f"/task/{made['id']}/decide", data={"decision": "send_back", "note": "", "csrf": csrf})
        assert r.status_code == 400 and "needs a note" in r.text
        r = web.post(
            f"/task/{made['id']}/decide",
            data={"decision": "send_back", "note": "Use v2: v1 is deprecated.", "csrf": csrf},
        )
        assert r.status_code == 303
        inbox = await call(coder, "get_messages")
        said = [m for m in inbox["messages"] if m["task_id"] == made["id"] and "v1 is deprecated" in m["content"]]
        assert said and said[0]["sender"] == "ann", inbox
        card = await call(coder, "get_task", task_id=made["id"])
        assert card["status"] == "todo" and card["reserved_for"] == "coder"
        assert card["history"][-1]["actor"] == "ann" and card["history"][-1]["action"] == "sent back by a person"
        refused = await call_error(coder2, "claim_task", task_id=made["id"])
        assert "reserved for coder" in refused

        # back to needs_human, then reassigned to coder2, who is told
        claim = await call(coder, "claim_task", task_id=made["id"])
        await call(
            coder, "update_task", task_id=made["id"], token=claim["token"], status="needs_human", reason="still unsure"
        )
        r = web.post(
            f"/task/{made['id']}/decide",
            data={"decision": "reassign", "assign_to": "coder2", "note": "coder2 knows v2", "csrf": csrf},
        )
        assert r.status_code == 303
        told = await call(coder2, "get_messages")
        assert any(m["intent"] == "task_assignment" and m["task_id"] == made["id"] for m in told["messages"])
        assert (await call(coder2, "claim_task", task_id=made["id"]))["claimed"] is True

        # a person posts to the card's thread: its holder hears it, as from the person
        r = web.post(
            f"/task/{made['id']}/message", data={"content": "Ping me when v2 is wired.", "intent": "ask", "csrf": csrf}
        )
        assert r.status_code == 303
        heard = await call(coder2, "get_messages")
        assert any(
            m["sender"] == "ann" and m["intent"] == "ask" and "v2 is wired" in m["content"] and "summary" not in m
            for m in heard["messages"]
        ), heard  # a headline that repeats: left out
        assert web.post(f"/task/{made['id']}/message", data={"content": "  ", "csrf": csrf}).status_code == 400

        # deciding a card that is not waiting on a human is refused, nothing changes
        r = web.post(f"/task/{made['id']}/decide", data={"decision": "pass", "csrf": csrf})
        assert r.status_code == 409 and "not needs_human" in r.text


async def test_human_approval_is_a_lens_and_direct_messages_stay_private(site):
    home, url, people = site
    base = _base(url)
    web, csrf = login(base, people["ann"])
    async with http_client(url, people["coder"]) as coder:
        made = await call(coder, "create_task", title="Document the release", task_type="docs")
        claim = await call(coder, "claim_task", task_id=made["id"])
        await call(coder, "complete_task", task_id=made["id"], token=claim["token"], output="Release notes: …")
        review = await call(coder, "get_review", task_id=made["id"], wait_seconds=120)
        assert review["status"] == "needs_human", review  # the critics passed it; docs need a person
        card = await call(coder, "get_task", task_id=made["id"])
        assert "approval" in card["blocked_reason"]
        r = web.post(f"/task/{made['id']}/decide", data={"decision": "pass", "note": "Looks right.", "csrf": csrf})
        assert r.status_code == 303
        assert (await call(coder, "get_task", task_id=made["id"]))["status"] == "done"
        trail = await call(coder, "get_review", task_id=made["id"], full=True)
        human = [c for r in trail["rounds"] for c in r["critiques"] if c["lens"] == "human"]
        assert human and human[0]["critic"] == "ann" and human[0]["verdict"] == "PASS"
        page = web.get(f"/task/{made['id']}").text
        assert "Looks right." in page and ">human<" in page

        await call(coder, "publish_message", intent="secret", recipient="coder2", content="the private plan xyzzy")
        await call(coder, "publish_message", intent="note", content="a public word plugh")
        pool = web.get("/messages").text
        assert "plugh" in pool and "xyzzy" not in pool
        assert "xyzzy" not in web.get(f"/task/{made['id']}").text


def _first_event(response: httpx.Response, kind: str, found: dict, ready: threading.Event) -> None:
    event = None
    for line in response.iter_lines():
        if line == "event: hello":
            ready.set()
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event == kind:
            data = json.loads(line[6:])
            if data.get("cards"):
                found.update(data)
                return


async def test_live_events_reach_pages_from_another_server_process(site, tmp_path):
    """A change made through a second server process on the same data directory reaches a page
    watching the first one (the cross-process watcher), as rendered cards and column counts."""
    home, url, people = site
    base = _base(url)
    web, _ = login(base, people["ann"])
    proc2, url2 = serve_http(home)
    try:
        found: dict = {}
        ready = threading.Event()
        with web.stream("GET", "/events", timeout=120) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            reader = threading.Thread(target=_first_event, args=(response, "cards", found, ready), daemon=True)
            reader.start()
            assert ready.wait(60)
            async with http_client(url2, people["coder"]) as coder:
                made = await call(coder, "create_task", title="Seen <b>live</b>", task_type="code")
            reader.join(120)
        assert any(c["id"] == made["id"] and c["status"] == "todo" for c in found["cards"]), found
        html = next(c["html"] for c in found["cards"] if c["id"] == made["id"])
        assert "Seen &lt;b&gt;live&lt;/b&gt;" in html
        assert found["counts"]["todo"] >= 1
    finally:
        stop_process(proc2)


def _events_until(response: httpx.Response, done, seen: list, ready: threading.Event) -> None:
    """Collect (event, data) pairs from an SSE stream until done(seen) says enough."""
    event = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
            if event == "hello":
                ready.set()
        elif line.startswith("data: "):
            seen.append((event, json.loads(line[6:])))
            if done(seen):
                return


async def test_a_filtered_board_is_pushed_its_own_column_counts(site):
    """A page showing only docs cards gets the docs cards' counts pushed with each update (counted once
    per filter per batch by the server); an unfiltered page gets the whole board's counts and no
    filtered ones."""
    home, url, people = site
    web, _ = login(_base(url), people["ann"])
    filtered, plain, ready_f, ready_p = [], [], threading.Event(), threading.Event()

    def docs_counted(seen):
        return any(e == "counts" and d["todo"] == 1 for e, d in seen)

    def all_counted(seen):  # the whole board's counts, and the rest of that update (a `counts` would follow)
        at = next((n for n, (e, d) in enumerate(seen) if e == "cards" and d["counts"]["todo"] >= 3), None)
        return at is not None and any(e == "change" for e, _ in seen[at + 1 :])

    with web.stream("GET", "/events?type=docs", timeout=120) as rf, web.stream("GET", "/events", timeout=120) as rp:
        readers = [
            threading.Thread(target=_events_until, args=(rf, docs_counted, filtered, ready_f), daemon=True),
            threading.Thread(target=_events_until, args=(rp, all_counted, plain, ready_p), daemon=True),
        ]
        for r in readers:
            r.start()
        assert ready_f.wait(60) and ready_p.wait(60)
        async with http_client(url, people["coder"]) as coder:
            for title, kind in (("one", "code"), ("two", "code"), ("the manual", "docs")):
                await call(coder, "create_task", title=title, task_type=kind)
        for r in readers:
            r.join(120)
    assert docs_counted(filtered), filtered
    assert all(d["todo"] <= 1 for e, d in filtered if e == "counts"), filtered  # never the whole board's
    assert all_counted(plain), plain
    assert not any(e == "counts" for e, _ in plain), plain


async def test_pages_past_the_filter_bound_are_told_to_count_for_themselves(board, monkeypatch):
    """The hub counts at most MAX_FILTERS distinct filters per update (here 1); a page past them gets a null
    `counts` event (static/app.js then fetches /board/counts), never another filter's counts."""
    import asyncio

    import anyio

    from hiveboard.board import NewTask
    from hiveboard.server.web import live

    monkeypatch.setattr(live, "MAX_FILTERS", 1)
    board.agents.register("ann")
    hub = live.LiveHub(board)
    pages = [hub.stream(("code", None, None)), hub.stream(("docs", None, None)), hub.stream()]
    try:
        for page in pages:
            assert b"event: hello" in await page.__anext__()
        await anyio.to_thread.run_sync(lambda: board.create("ann", NewTask(title="t", task_type="code")))
        got = [(await asyncio.wait_for(page.__anext__(), 60)).decode() for page in pages]
    finally:
        for page in pages:
            await page.aclose()
        hub.close()
    assert 'event: counts\ndata: {"todo": 1,' in got[0]  # the first filter: counted for it
    assert "event: counts\ndata: null" in got[1]  # past the bound: count it yourself
    assert "event: counts" not in got[2] and '"counts": {"todo": 1' in got[2]  # unfiltered: the whole board's


async def test_wall_screen_is_read_only(tmp_path):
    home = tmp_path / "home"
    proc, url = serve_http(home, env={**os.environ, "HIVEBOARD_WEB_READ_ONLY": "true"})
    try:
        base = _base(url)
        anon = httpx.Client(base_url=base, timeout=60)
        page = anon.get("/board")
        assert page.status_code == 200 and "New card" not in page.text and "read-only" in page.text
        assert anon.get("/metrics").status_code == 200
        r = anon.post("/tasks", data={"title": "x", "task_type": "code"})
        assert r.status_code == 401  # no person, no action
        token = agent_token(home, "wally")
        async with http_client(url, token) as agent:
            assert (await call(agent, "list_tasks"))["total"] == 0
    finally:
        stop_process(proc)


async def test_a_replaced_token_ends_its_sessions(site):
    home, url, people = site
    base = _base(url)
    web, _ = login(base, people["ann"])
    assert web.get("/board").status_code == 200
    subprocess.run(
        hiveboard_cmd("--home", str(home), "agent", "token", "ann"), capture_output=True, text=True, check=True
    )
    assert web.get("/board", follow_redirects=False).status_code == 303


async def test_memory_search_and_full_read(site):
    home, url, people = site
    web, _ = login(_base(url), people["ann"])
    async with http_client(url, people["coder"]) as coder:
        made = await call(
            coder,
            "record_lesson",
            problem="Retries hammered the flaky payment API " + "x" * 400,
            fix="Back off exponentially with jitter, capped at 30 s",
            task_type="code",
            tags=["payments"],
        )
    item = made["item"]["id"]
    page = web.get("/memory", params={"q": "payment retries backoff", "mode": "keyword", "tags": "payments"}).text
    assert f'href="/memory/{item}"' in page and "Retries hammered" in page  # the hit, cut; the item is whole
    assert (
        web.get("/memory", params={"q": "payment retries", "mode": "keyword", "tags": "other"}).text.count(
            'href="/memory/'
        )
        == 0
    )
    full = web.get(f"/memory/{item}").text
    assert "x" * 400 in full and "capped at 30 s" in full and "payments" in full
    assert web.get("/memory/999999").status_code == 404
