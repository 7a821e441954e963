"""`hiveboard memory export` and `import` as an operator runs them: a round trip through a file, every
line checked before anything is written, progress on stderr, and the pending count in `hiveboard board`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import call, run_cli

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import open_memory

pytestmark = pytest.mark.anyio


async def fill(connect, memory) -> None:
    async with connect("alice", memory=memory) as c:
        await call(
            c,
            "remember",
            items=[
                {"text": "Staging is reset every Sunday at 02:00 UTC.", "task_type": "ops", "tags": ["staging"]},
                {
                    "kind": "snippet",
                    "title": "backoff",
                    "text": "for n in range(5):\n    sleep(2 ** n)",
                    "tags": ["retry"],
                },
                {"kind": "document", "text": "Café menu — naïve façade, 日本語, emoji \U0001f525\n" + "line\n" * 300},
            ],
        )
        old = await call(
            c, "record_lesson", problem="Tests hit the real payment API.", fix="Skip them in CI.", task_type="test"
        )
        await call(
            c,
            "record_lesson",
            problem="Tests hit the real payment API.",
            fix="Run a local fake of it.",
            task_type="test",
            supersedes=old["item"]["id"],
        )
        await call(c, "create_task", title="Set up staging")
        await call(c, "publish_message", intent="info", task_id=1, content="Staging uses Postgres 15.")


async def test_export_then_import_round_trips(tmp_path, connect, board, with_memory):
    await fill(connect, with_memory)
    dump = tmp_path / "memory.jsonl"
    exported = run_cli("--home", str(tmp_path), "memory", "export", str(dump))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == "" and "exported 6 memory items" in exported.stderr
    lines = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert [item["kind"] for item in lines] == ["note", "snippet", "document", "lesson", "lesson", "message"]
    assert lines[3]["superseded_by"] == lines[4]["id"] and lines[5]["source"] == "message:1"

    other = tmp_path / "other"
    imported = run_cli("--home", str(other), "memory", "import", str(dump))
    assert imported.returncode == 0, imported.stderr
    assert "importing [" in imported.stderr and "(100%)" in imported.stderr  # the progress bar, on stderr
    assert "imported 6 memory items" in imported.stderr and "all items are indexed by meaning" in imported.stderr
    again = run_cli("--home", str(other), "memory", "export")  # to stdout
    assert again.returncode == 0, again.stderr
    # the same items, ids, links, authors and times; what came in through a file is imported, whatever it said
    assert [json.loads(line) for line in again.stdout.splitlines()] == [{**item, "trust": "imported"} for item in lines]

    copy = Board(Store(other / "hiveboard.db"))
    memory = open_memory(copy, get_embedder(), other)
    try:
        assert copy.knowledge.pending() == 0  # the import indexed what it wrote
        hits = memory.query("when is staging wiped", mode="vector").hits
        assert hits[0].kind == "note" and hits[0].title.startswith("Staging is reset")
        payment = memory.query("payment API tests", kinds=["lesson"], include_deprecated=True).hits
        old = next(h for h in payment if h.deprecated)
        assert old.superseded_by == next(h.id for h in payment if not h.deprecated)
    finally:
        memory.stop()
        copy.store.close()


def test_import_checks_every_line_first_and_writes_nothing_on_a_bad_one(tmp_path):
    dump = tmp_path / "bad.jsonl"
    dump.write_text(
        "\n".join(
            [
                json.dumps({"text": "fine"}),
                json.dumps({"text": "too many tags", "tags": [f"t{n}" for n in range(21)]}),
                "",
                '{"text": "a lone \\udc00 surrogate"}',
                json.dumps({"text": "x", "kind": "rumour"}),
                json.dumps({"text": "x", "titel": "typo"}),
                json.dumps(["not", "an", "object"]),
                "{broken",
                json.dumps({"text": "fine too"}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    home = tmp_path / "home"
    result = run_cli("--home", str(home), "memory", "import", str(dump))
    assert result.returncode == 2
    said = result.stderr
    assert "line 2: field 'tags': List should have at most 20 items" in said
    assert "line 4: field 'text' contains a lone UTF-16 surrogate" in said
    assert "line 5: field 'kind': kind must be one of lesson, critique, output, message, note, snippet" in said
    assert "line 6: field 'titel': Extra inputs are not permitted" in said
    assert "line 7: not a JSON object" in said and "line 8: not JSON" in said
    assert "line 1:" not in said and "line 9:" not in said and "line 3:" not in said
    assert "6 bad line(s)" in said and "nothing was imported" in said
    board = Board(Store(home / "hiveboard.db"))
    assert board.knowledge.count() == 0
    board.store.close()
    missing = run_cli("--home", str(home), "memory", "import", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "is not a file" in missing.stderr


async def test_board_shows_how_many_items_wait_for_the_index(tmp_path, connect, with_memory):
    async with connect("alice", memory=with_memory) as c:  # the indexing worker is not running here
        await call(c, "remember", items=[{"text": f"note {n}"} for n in range(3)])
    out = run_cli("--home", str(tmp_path), "board")
    assert out.returncode == 0, out.stderr
    assert "memory: 3 items, 3 waiting for the vector index" in out.stdout
    with_memory.drain()
    assert "memory: 3 items, 0 waiting for the vector index" in run_cli("--home", str(tmp_path), "board").stdout


def test_export_of_an_empty_memory_is_an_empty_file(tmp_path: Path):
    out = run_cli("--home", str(tmp_path), "memory", "export")
    assert out.returncode == 0 and out.stdout == "" and "exported 0 memory items" in out.stderr
