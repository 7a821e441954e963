"""The web board's Memory page, in-process (the app over httpx's ASGI transport): before any search it shows
the newest items of each kind, so a memory that holds items never looks empty."""

from __future__ import annotations

import re

import httpx2
import pytest

from hiveboard.board.knowledge import NewItem
from hiveboard.server.cli import http_app
from hiveboard.server.config import load_settings
from hiveboard.server.stores import open_board

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


async def test_the_memory_page_shows_the_newest_items_of_each_kind_before_a_search(tmp_path):
    settings = load_settings(home=tmp_path)
    board = open_board(settings)
    token = board.agents.new_token("ann", "human")
    lessons = [NewItem(kind="lesson", title=f"lesson {n}", text=f"problem {n}", task_type="code") for n in range(12)]
    notes = [NewItem(kind="note", title="deploys go out on Tuesdays", text="ask lee first")]
    with board.store.write() as db:
        board.knowledge.add_many(db, [*lessons, *notes], "lee")
    web = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=http_app(settings, board)), base_url=BASE)
    async with web:
        r = await web.post("/login", data={"token": token, "next": "/memory"}, headers={"origin": BASE})
        assert r.status_code == 303, r.text
        page = (await web.get("/memory")).text
    board.store.close()
    titles = re.findall(r'<a href="/memory/\d+">([^<]+)</a>', page)
    assert titles == [*(f"lesson {n}" for n in range(11, 3, -1)), "deploys go out on Tuesdays"]  # newest first
    assert re.search(r"<h2>lesson <span class=\"count\">12</span></h2>", page) and "4 older: search" in page
    assert re.search(r"<h2>note <span class=\"count\">1</span></h2>", page) and "nothing found" not in page
