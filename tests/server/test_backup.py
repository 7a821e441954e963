"""`hiveboard backup`, `backup --verify` and `restore`: a backup taken while eight agents write restores whole,
on SQLite and on PostgreSQL; a damaged backup is refused; restore writes only into an empty place."""

from __future__ import annotations

import json
import shutil
import time
import uuid

import anyio
import pytest
from conftest import call, clean_env, http_client, run_cli, self_registered_token, serve_http, stop_process

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

AGENTS = 8
# what each agent keeps running into: lessons of different agents differ in meaning, so a search by one
# lesson's words finds it among the others
TOPICS = (
    "timezone offsets lost when parsing ISO dates",
    "SQL injection through the search box",
    "network retries without backoff overload the API",
    "unicode file names break the upload",
    "the cache grows without bound and leaks memory",
    "currency amounts rounded with floats",
    "CSV export drops the header row",
    "the login redirect loops after logout",
)


def _restore_env(request, backend: str) -> dict[str, str]:
    """Where a restore goes: a new data directory; on PostgreSQL also a new, empty database and a new collection."""
    if backend == "sqlite":
        return clean_env()
    return clean_env(
        HIVEBOARD_DB=request.getfixturevalue("postgres").database(),
        HIVEBOARD_CHROMA_URL=request.getfixturevalue("chroma_server"),
        HIVEBOARD_CHROMA_COLLECTION=f"t{uuid.uuid4().hex[:16]}",
    )


async def _agent(url: str, name: str, stop: anyio.Event, acked: list) -> None:
    """One agent's work until `stop`: a card created and claimed, a message, a lesson; each write noted with
    the time its answer came back (acknowledged)."""
    token = await self_registered_token(url, name)
    async with http_client(url, token) as client:
        n = 0
        while not stop.is_set():
            n += 1
            card = await call(client, "create_task", title=f"{name} card {n}", task_type="docs")
            acked.append(("task", card["id"], time.time()))
            claim = await call(client, "claim_task", task_id=card["id"])
            acked.append(("claim", (card["id"], name), time.time()))
            text = f"{name} says note {n}"
            await call(client, "publish_message", intent="info", content=text)
            acked.append(("message", text, time.time()))
            topic = TOPICS[int(name.rsplit("-", 1)[1])]
            lesson = await call(
                client,
                "record_lesson",
                task_type="docs",
                problem=f"{topic} (seen {n} times)",
                fix=f"write a test for {topic} first, then fix it",
            )
            acked.append(("lesson", lesson["item"]["id"], time.time()))
            if n == 2 and name == "agent-1":  # a review in progress when the backup is taken
                await call(client, "complete_task", task_id=card["id"], token=claim["token"], output="links fixed")


async def test_a_backup_taken_while_eight_agents_write_restores_whole(request, tmp_path, backend, node_env):
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.server.backup import MANIFEST

    home, backup = tmp_path / "home", tmp_path / "backup"
    proc, url = serve_http(home, env=node_env)
    try:
        acked: list = []
        stop = anyio.Event()
        taken: dict = {}

        async def back_up() -> None:
            while (
                len({w[1] for kind, w, _ in acked if kind == "claim"}) < AGENTS
                or sum(kind == "lesson" for kind, _, _ in acked) < AGENTS
            ):  # every agent is writing
                await anyio.sleep(0.05)
            taken["started"] = time.time()
            taken["done"] = await anyio.to_thread.run_sync(
                lambda: run_cli("--home", str(home), "backup", str(backup), env=node_env)
            )
            await anyio.sleep(0.3)  # writes still go on after it
            stop.set()

        async with anyio.create_task_group() as tg:
            for n in range(AGENTS):
                tg.start_soon(_agent, url, f"agent-{n}", stop, acked)
            tg.start_soon(back_up)
    finally:
        stop_process(proc)
    done = taken["done"]
    assert done.returncode == 0, done.stderr
    assert f"into {backup}" in done.stdout
    before = [(kind, what) for kind, what, at in acked if at < taken["started"]]
    assert len({w for k, w in before if k == "claim"}) >= AGENTS and any(at > taken["started"] for *_, at in acked)

    verified = run_cli("backup", "--verify", str(backup), env=clean_env())
    assert verified.returncode == 0 and "whole" in verified.stdout, verified.stderr
    manifest = json.loads((backup / MANIFEST).read_text())
    assert manifest["store"] == backend and manifest["rows"]["tasks"] >= AGENTS

    restored, env = tmp_path / "restored", _restore_env(request, backend)
    done = run_cli("--home", str(restored), "restore", str(backup), env=env)
    assert done.returncode == 0, done.stderr
    assert "restored" in done.stdout and "indexed" in done.stdout
    doctor = run_cli("--home", str(restored), "doctor", env=env)
    assert "ok    database:" in doctor.stdout and "FAIL" not in doctor.stdout, doctor.stdout + doctor.stderr

    target = env.get("HIVEBOARD_DB") or str(restored / "hiveboard.db")
    board = Board(Store(target))
    try:
        with board.store.read() as db:
            tasks = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, status, assignee FROM tasks")}
            messages = {r[0] for r in db.execute("SELECT content FROM messages")}
            lessons = {r[0]: r[1] for r in db.execute("SELECT id, text FROM memory_items WHERE kind = 'lesson'")}
            reviews = db.execute("SELECT count(*) FROM reviews").fetchone()[0]
        for kind, what in before:  # every write acknowledged before the backup began is there
            if kind == "task":
                assert what in tasks
            elif kind == "claim":
                assert tasks[what[0]][1] == what[1], what
            elif kind == "message":
                assert what in messages, what
            else:
                assert what in lessons, what
        assert reviews >= 1  # the review that was in progress came along (its worker picks it up again)
        assert board.knowledge.pending() == 0  # restore rebuilt the vector index from the store
    finally:
        board.store.close()

    # the restored server serves the board, and its vector search finds the lessons the agents recorded
    proc, url = serve_http(restored, env=env)
    try:
        token = await self_registered_token(url, "auditor")
        async with http_client(url, token) as client:
            shown = await call(client, "get_board")
            assert shown["total"] == len(tasks), shown
            for lesson_id in [w for k, w in before if k == "lesson"][:3]:
                problem = lessons[lesson_id].split("\n", 1)[0].removeprefix("Problem: ")
                found = await call(client, "query_memory", query=problem, mode="vector", kinds=["lesson"], k=20)
                assert lesson_id in [h["id"] for h in found["hits"]], (problem, found)
    finally:
        stop_process(proc)


def test_verify_and_restore_refuse_a_truncated_or_altered_backup(tmp_path, node_env, backend, request):
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "agent", "add", "lee", "--role", "lead", env=node_env).returncode == 0
    backup = tmp_path / "backup"
    done = run_cli("--home", str(home), "backup", str(backup), env=node_env)
    assert done.returncode == 0, done.stderr
    store = next(p for p in backup.iterdir() if p.name.startswith("board."))

    truncated = tmp_path / "truncated"
    shutil.copytree(backup, truncated)
    data = (truncated / store.name).read_bytes()
    (truncated / store.name).write_bytes(data[: len(data) // 2])
    altered = tmp_path / "altered"
    shutil.copytree(backup, altered)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    (altered / store.name).write_bytes(bytes(flipped))
    no_manifest = tmp_path / "no-manifest"
    shutil.copytree(backup, no_manifest)
    (no_manifest / "manifest.json").unlink()

    elsewhere = tmp_path / "elsewhere"  # a manifest naming a file outside the backup is not a manifest
    shutil.copytree(backup, elsewhere)
    manifest = json.loads((elsewhere / "manifest.json").read_text())
    manifest["files"]["../../outside"] = manifest["files"][store.name]
    (elsewhere / "manifest.json").write_text(json.dumps(manifest))

    for broken, said in (
        (truncated, "truncated"),
        (altered, "sha256"),
        (no_manifest, "manifest.json"),
        (elsewhere, "not a hiveboard backup's manifest"),
    ):
        verified = run_cli("backup", "--verify", str(broken), env=clean_env())
        assert verified.returncode == 2 and said in verified.stderr, verified.stderr
        assert verified.stderr.count("\n") == 1  # one sentence
        into, env = tmp_path / f"into-{broken.name}", _restore_env(request, backend)
        refused = run_cli("--home", str(into), "restore", str(broken), env=env)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert not into.exists()  # nothing was written
    assert run_cli("backup", "--verify", str(backup), env=clean_env()).returncode == 0


def test_restore_writes_only_into_an_empty_place(tmp_path, node_env, backend, request):
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "agent", "add", "lee", env=node_env).returncode == 0
    backup = tmp_path / "backup"
    assert run_cli("--home", str(home), "backup", str(backup), env=node_env).returncode == 0
    again = run_cli("--home", str(home), "backup", str(backup), env=node_env)
    assert again.returncode == 2 and "not an empty directory" in again.stderr

    # the live board's own place: its data directory (SQLite), its database (PostgreSQL, whose node keeps nothing
    # in the data directory)
    refused = run_cli("--home", str(home), "restore", str(backup), env=node_env)
    said = "is not empty" if backend == "sqlite" else "already holds tables"
    assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    if backend == "postgresql":  # a new data directory does not make the database empty
        used = run_cli("--home", str(tmp_path / "fresh"), "restore", str(backup), env=node_env)
        assert used.returncode == 2 and said in used.stderr, used.stderr
        assert not (tmp_path / "fresh").exists()  # nothing was written


def test_pg_dump_older_than_the_server_is_refused_in_one_sentence(postgres, monkeypatch, tmp_path):
    from hiveboard.server import backup
    from hiveboard.server.config import SetupError

    url = postgres.database()
    monkeypatch.setattr(backup, "tool_major", lambda tool: 9)
    with pytest.raises(SetupError, match=r"pg_dump must be at least the server's version; install postgresql-client"):
        backup.take(tmp_path / "backup", db_url=url)
    assert not (tmp_path / "backup").exists()


def test_scheduled_backups_are_taken_when_due_and_only_the_newest_are_kept(tmp_path, board, backend):
    """What `serve` runs with [backup] every_hours: a backup when the newest is older than that, the oldest
    removed past `keep`; each one whole."""
    from hiveboard.server.backup import BackupWorker, verify
    from hiveboard.server.config import load_settings

    settings = load_settings(home=tmp_path / "home", db=board.store.path, backup={"every_hours": 1, "keep": 2})
    board.agents.ensure("lee")
    worker = BackupWorker(board, settings)
    folder = tmp_path / "home" / "backups"
    worker.step(0)
    first = sorted(folder.iterdir())
    assert len(first) == 1 and verify(first[0]).rows["agents"] == 1
    worker.step(0)  # the newest is not an hour old: nothing
    assert sorted(folder.iterdir()) == first
    worker.every = 0  # due every time from now on
    for _ in range(3):
        worker.step(0)
    kept = sorted(folder.iterdir())
    assert len(kept) == 2 and first[0] not in kept
    for path in kept:
        verify(path)
