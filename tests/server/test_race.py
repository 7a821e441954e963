"""Races as a team really produces them: many agents, many connections, more than one server process.

Every assertion is about outcomes a user would see on the board (who holds which card, what the
history says, which edit won), never about timing. Loopback only.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import get_args

import anyio
import pytest
from conftest import (
    START_TIMEOUT,
    agent_token,
    call,
    clean_env,
    data,
    http_client,
    self_registered_token,
)
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from hiveboard.board.agents import Agents
from hiveboard.board.db import Store
from hiveboard.board.models import Priority

PRIORITIES = get_args(Priority)


def stdio_window(home: Path, agent: str) -> Client:
    """One IDE window: its own `hiveboard serve` stdio process, acting as `agent` (HIVEBOARD_AGENT)."""
    env = clean_env(HIVEBOARD_AGENT=agent)
    return Client(
        StdioServerParameters(
            command=sys.executable, args=["-m", "hiveboard.server", "--home", str(home), "serve"], env=env
        )
    )


async def claim_next(client: Client) -> dict | None:
    """claim_task with no task_id: the claim answer, or None once the board answers claimed=false."""
    result = await client.call_tool("claim_task", {})
    if result.is_error:
        raise AssertionError(f"claim_task failed instead of answering: {result.content[0].text[-1500:]}")
    answer = data(result)
    assert answer.get("claimed") in (True, False), f"claim_task answer has no claimed flag: {answer}"
    if not answer["claimed"]:
        assert answer.get("token") is None and answer.get("task") is None
        return None
    return answer


async def all_tasks(client: Client, **filters) -> list[dict]:
    """Every card matching the filters, following list_tasks cursors page by page."""
    tasks: list[dict] = []
    cursor = None
    while True:
        page = await call(client, "list_tasks", limit=200, **filters, **({"cursor": cursor} if cursor else {}))
        tasks += page["tasks"]
        cursor = page.get("next_cursor")
        if cursor is None:
            assert len(tasks) == page["total"]
            return tasks


def column_counts(board: dict) -> dict[str, int]:
    return {c["status"]: c["count"] for c in board["columns"]}


async def register_all(url: str, names: list[str]) -> dict[str, str]:
    """Each agent registers itself over HTTP (whoami(name=...)), all at once; their bearer tokens."""
    tokens: dict[str, str] = {}

    async def register(name: str) -> None:
        tokens[name] = await self_registered_token(url, name)

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(register, name)
    assert len(set(tokens.values())) == len(names)
    return tokens


@pytest.mark.anyio
@pytest.mark.slow
async def test_sixteen_http_clients_claim_each_card_exactly_once(tmp_path, http_server):
    home = tmp_path / "home"
    names = [f"agent-{i:02d}" for i in range(16)]
    lead_token = agent_token(home, "lead")  # the operator's token; the team registers itself
    url = http_server(home=home)
    tokens = {"lead": lead_token, **await register_all(url, names)}

    async with http_client(url, tokens["lead"]) as lead:
        seeded = [
            (await call(lead, "create_task", title=f"card {i}", priority=PRIORITIES[i % 4]))["id"] for i in range(300)
        ]
    assert len(set(seeded)) == 300

    claims: list[tuple[int, int, str]] = []  # (task id, fencing token, agent that got it)

    async def claimer(name: str) -> None:
        async with http_client(url, tokens[name]) as client:
            assert (await call(client, "whoami"))["agent"] == name
            while (answer := await claim_next(client)) is not None:
                task = answer["task"]
                assert (task["status"], task["assignee"]) == ("in_progress", name)
                claims.append((task["id"], answer["token"], name))

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(claimer, name)

    per_id = Counter(task_id for task_id, _, _ in claims)
    assert sorted(per_id) == sorted(seeded), "some cards were never claimed, or unknown ids were"
    assert [i for i, n in per_id.items() if n > 1] == [], "cards claimed more than once"
    holder = {task_id: name for task_id, _, name in claims}
    assert len(set(holder.values())) > 1, "one agent took everything: the clients did not really race"

    async with http_client(url, tokens["lead"]) as lead:
        on_board = await all_tasks(lead, status="in_progress")
        assert {t["id"]: t["assignee"] for t in on_board} == holder
        counts = column_counts(await call(lead, "get_board", top=0))
        assert counts["in_progress"] == 300 and counts["todo"] == 0
        for name in names[:2]:  # the per-agent view agrees with what each agent was told
            mine = await all_tasks(lead, assignee=name)
            assert sorted(t["id"] for t in mine) == sorted(i for i, n in holder.items() if n == name)

    token_of = {task_id: token for task_id, token, _ in claims}
    foreign = {name: next(i for i, n in holder.items() if n != name) for name in names}
    refused: list[str] = []
    all_refused = anyio.Event()

    async def finisher(name: str) -> None:
        mine = [task_id for task_id, n in holder.items() if n == name]
        async with http_client(url, tokens[name]) as client:
            # Someone else's card, even with its token, is refused (checked before anyone completes).
            other = foreign[name]
            refusal = await client.call_tool(
                "complete_task", {"task_id": other, "token": token_of[other], "output": "not mine"}
            )
            assert refusal.is_error and f"claimed by {holder[other]}" in refusal.content[0].text
            refused.append(name)
            if len(refused) == len(names):
                all_refused.set()
            await all_refused.wait()
            for task_id in mine:
                done = await call(
                    client,
                    "complete_task",
                    task_id=task_id,
                    token=token_of[task_id],
                    output=f"{name} finished {task_id}",
                )
                assert (done["status"], done["assignee"]) == ("review", name)  # the server's critics take over
            for task_id in mine:
                history = (await call(client, "get_task", task_id=task_id, history=100))["history"]
                claimed_by = [h["actor"] for h in history if h["action"] == "claimed"]
                completed_by = [h["actor"] for h in history if h["action"] == "completed"]
                assert (claimed_by, completed_by) == ([name], [name]), f"task {task_id}: {history}"

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(finisher, name)

    async with http_client(url, tokens["lead"]) as lead:
        deadline = anyio.current_time() + START_TIMEOUT
        # the review worker passes each card on (no critic applies to plain text)
        while (counts := column_counts(await call(lead, "get_board", top=0)))[
            "done"
        ] < 300 and anyio.current_time() < deadline:
            await anyio.sleep(0.2)
        assert counts["done"] == 300 and sum(counts.values()) == 300
        done = await all_tasks(lead, status="done")
        assert {t["id"]: t["assignee"] for t in done} == holder


@pytest.mark.anyio
@pytest.mark.slow
async def test_two_stdio_server_processes_share_one_board(tmp_path):
    home = tmp_path / "shared"
    windows = ("window-a", "window-b")
    async with stdio_window(home, windows[0]) as a, stdio_window(home, windows[1]) as b:
        clients = {windows[0]: a, windows[1]: b}

        # Both windows fill the board at the same time.
        seeded: list[int] = []

        async def seed(name: str) -> None:
            for i in range(75):
                seeded.append(
                    (await call(clients[name], "create_task", title=f"{name} seed {i}", priority=PRIORITIES[i % 4]))[
                        "id"
                    ]
                )

        async with anyio.create_task_group() as tg:
            for name in windows:
                tg.start_soon(seed, name)
        assert len(set(seeded)) == 150

        # Both processes take the next card until none is left (two requests in flight per window).
        claims: list[tuple[int, int, str]] = []

        async def claimer(name: str) -> None:
            while (answer := await claim_next(clients[name])) is not None:
                assert answer["task"]["assignee"] == name
                claims.append((answer["task"]["id"], answer["token"], name))

        async with anyio.create_task_group() as tg:
            for name in windows:
                tg.start_soon(claimer, name)
                tg.start_soon(claimer, name)

        per_id = Counter(task_id for task_id, _, _ in claims)
        assert sorted(per_id) == sorted(seeded)
        assert [i for i, n in per_id.items() if n > 1] == []
        holder = {task_id: name for task_id, _, name in claims}
        assert {t["id"]: t["assignee"] for t in await all_tasks(b, status="in_progress")} == holder
        assert column_counts(await call(a, "get_board", top=0))["in_progress"] == 150

        # Lost writes: notes on held cards, new cards, and notes on one shared todo card, all at once.
        shared = (await call(a, "create_task", title="shared notes"))["id"]
        created: dict[str, list[int]] = {name: [] for name in windows}

        async def note_held(name: str) -> None:
            for task_id, token, who in claims:
                if who == name:
                    await call(
                        clients[name], "update_task", task_id=task_id, token=token, note=f"{name} progress on {task_id}"
                    )

        async def create_new(name: str) -> None:
            for i in range(50):
                created[name].append((await call(clients[name], "create_task", title=f"{name} new {i}"))["id"])

        async def note_shared(name: str) -> None:
            for i in range(20):
                await call(clients[name], "update_task", task_id=shared, note=f"{name} shared {i}")

        async with anyio.create_task_group() as tg:
            for name in windows:
                tg.start_soon(note_held, name)
                tg.start_soon(create_new, name)
                tg.start_soon(note_shared, name)

        for task_id, _, name in claims:
            card = await call(b if name == windows[0] else a, "get_task", task_id=task_id, history=100)
            notes = [(h["actor"], h["action"], h.get("note")) for h in card["history"]]
            assert notes.count((name, "progress", f"{name} progress on {task_id}")) == 1, notes
            assert (card["status"], card["assignee"], card["version"]) == ("in_progress", name, 3)

        card = await call(b, "get_task", task_id=shared, history=100)
        notes = [h["note"] for h in card["history"] if h["action"] == "progress"]
        assert sorted(notes) == sorted(f"{name} shared {i}" for name in windows for i in range(20))
        assert card["version"] == 1 + 40

        new_ids = created[windows[0]] + created[windows[1]]
        assert len(new_ids) == 100 and len(set(new_ids)) == 100
        assert not set(new_ids) & (set(seeded) | {shared})
        todo = {t["id"]: t["title"] for t in await all_tasks(a, status="todo")}
        assert todo == {
            shared: "shared notes",
            **{task_id: f"{name} new {i}" for name in windows for i, task_id in enumerate(created[name])},
        }
        assert column_counts(await call(b, "get_board", top=0))["todo"] == 101


@pytest.mark.anyio
@pytest.mark.slow
async def test_optimistic_edit_refuses_lost_update(tmp_path, http_server):
    # Two server processes on one home: an IDE window over stdio and a teammate over HTTP. The teammate is a
    # lead, as `hiveboard agent add teammate --role lead` makes one: a card's title is its creator's or an
    # operator's to change.
    home = tmp_path / "home"
    url = http_server(home=home)
    store = Store(home / "hiveboard.db")
    try:
        token = Agents(store).new_token("teammate", "lead")
    finally:
        store.close()
    async with stdio_window(home, "window-a") as window, http_client(url, token) as teammate:
        editors = {"window-a": window, "teammate": teammate}
        for round_ in range(10):
            card = await call(window, "create_task", title=f"original {round_}")
            seen = {name: (await call(c, "get_task", task_id=card["id"]))["version"] for name, c in editors.items()}
            assert set(seen.values()) == {card["version"]}
            version = card["version"]

            results = {}

            async def edit(name: str) -> None:
                results[name] = await editors[name].call_tool(
                    "update_task",
                    {"task_id": card["id"], "expected_version": version, "title": f"{name}'s title {round_}"},
                )

            async with anyio.create_task_group() as tg:
                for name in editors:
                    tg.start_soon(edit, name)

            winners = [name for name, r in results.items() if not r.is_error]
            assert len(winners) == 1, {name: r.content[0].text for name, r in results.items()}
            winner = winners[0]
            (loser,) = set(editors) - {winner}
            refusal = results[loser].content[0].text
            assert f"since version {version}" in refusal and f"now version {version + 1}" in refusal, refusal

            for client in editors.values():
                now = await call(client, "get_task", task_id=card["id"])
                assert (now["title"], now["version"]) == (f"{winner}'s title {round_}", version + 1)
            history = (await call(window, "get_task", task_id=card["id"]))["history"]
            assert [h["actor"] for h in history if h["action"] == "edited"] == [winner]

            # The loser does what the refusal says: re-read, re-apply, retry — and now it lands.
            fresh = await call(editors[loser], "get_task", task_id=card["id"])
            await call(
                editors[loser],
                "update_task",
                task_id=card["id"],
                expected_version=fresh["version"],
                title=f"{loser}'s title {round_}",
            )
            final = await call(editors[winner], "get_task", task_id=card["id"])
            assert (final["title"], final["version"]) == (f"{loser}'s title {round_}", version + 2)
