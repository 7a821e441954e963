"""Several hiveboard nodes on one PostgreSQL: the CLI on a postgresql:// URL (its password never shown),
URLs of other databases refused, and two server processes with separate homes sharing one board, a
claim, and a wake-up."""

from __future__ import annotations

import anyio
import pytest
from conftest import call, call_error, clean_env, http_client, run_cli, stdio_server

pytestmark = pytest.mark.anyio


def with_password(url: str) -> str:
    """The URL with a password in it (the test cluster trusts loopback, so any password connects)."""
    return url.replace("postgresql://postgres@", "postgresql://postgres:pa55-w0rd@", 1)


def cli(home, url, *args):
    return run_cli("--home", str(home), *args, env=clean_env(HIVEBOARD_DB=url))


def test_the_cli_runs_on_a_postgresql_url_and_never_shows_its_password(postgres, tmp_path):
    url = with_password(postgres.database())
    added = cli(tmp_path / "home", url, "agent", "add", "lee", "--role", "lead")
    assert added.returncode == 0, added.stderr
    shown = cli(tmp_path / "home", url, "board")
    assert shown.returncode == 0 and "0 cards" in shown.stdout, shown.stderr
    listed = cli(tmp_path / "home", url, "agent", "list")
    assert "lee" in listed.stdout
    doctor = cli(tmp_path / "home", url, "doctor")
    assert "database: postgresql://postgres:***@" in doctor.stdout and "(reachable; schema current)" in doctor.stdout
    assert "FAIL  vector index: the board is on postgresql://postgres:***@" in doctor.stdout  # no Chroma server
    for done in (added, shown, listed, doctor):
        assert "pa55-w0rd" not in done.stdout + done.stderr
    assert not (tmp_path / "home" / "hiveboard.db").exists()  # no SQLite file beside it


def test_doctor_checks_the_chroma_server(postgres, chroma_server, tmp_path, unreachable_url):
    env = clean_env(HIVEBOARD_DB=postgres.database(), HIVEBOARD_CHROMA_URL=chroma_server)
    doctor = run_cli("--home", str(tmp_path / "home"), "doctor", env=env)
    assert f"ok    vector index: {chroma_server} (Chroma server answers)" in doctor.stdout, doctor.stdout
    env["HIVEBOARD_CHROMA_URL"] = unreachable_url
    doctor = run_cli("--home", str(tmp_path / "home"), "doctor", env=env)
    assert f"FAIL  vector index: the Chroma server {unreachable_url} cannot be reached (" in doctor.stdout
    assert doctor.returncode == 1


def test_a_postgresql_board_without_a_shared_vector_index_does_not_start(postgres, tmp_path):
    done = cli(tmp_path / "home", with_password(postgres.database()), "serve")
    assert done.returncode == 2 and "HIVEBOARD_CHROMA_URL" in done.stderr and done.stderr.count("\n") == 1
    assert "pa55-w0rd" not in done.stderr


def test_a_url_of_another_database_or_an_unreachable_server_is_one_sentence(postgres, tmp_path):
    other = run_cli("--home", str(tmp_path / "h1"), "--db", "mysql://root@127.0.0.1/board", "board")
    assert other.returncode == 2 and "mysql://… is not supported" in other.stderr
    gone = cli(tmp_path / "h2", "postgresql://postgres:pa55-w0rd@127.0.0.1:1/nowhere", "board")
    assert gone.returncode == 2 and "cannot be used" in gone.stderr and "pa55-w0rd" not in gone.stderr
    assert gone.stderr.count("\n") == 1, gone.stderr


async def test_two_nodes_share_one_board_its_claims_and_its_wake_ups(postgres, chroma_server, tmp_path):
    url = postgres.database()

    def node(n: int, agent: str):
        env = clean_env(HIVEBOARD_DB=url, HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_AGENT=agent)
        env["HIVEBOARD_REVIEW__ENABLED"] = "false"
        return stdio_server(tmp_path / f"node{n}", env=env)

    async with node(1, "alice") as one, node(2, "bob") as two:
        card = await call(one, "create_task", title="made on node one")
        claim = await call(two, "claim_task")
        assert claim["claimed"] and claim["task"]["id"] == card["id"]
        assert "claimed by bob" in await call_error(one, "claim_task", task_id=card["id"])
        async with anyio.create_task_group() as tg:
            got = {}

            async def wait() -> None:
                got["inbox"] = await call(two, "get_messages", wait_seconds=30)

            tg.start_soon(wait)
            await anyio.sleep(0.5)  # bob is waiting on node two
            await call(one, "publish_message", intent="info", recipient="bob", content="hello from node one")
        assert [m["content"] for m in got["inbox"]["messages"]] == ["hello from node one"]
        done = await call(two, "complete_task", task_id=card["id"], token=claim["token"], output="did it")
        assert done["status"] == "done"
        assert (await call(one, "get_task", task_id=card["id"]))["status"] == "done"


def test_migrate_copies_a_sqlite_board_into_postgresql_and_proves_it(postgres, tmp_path):
    from hiveboard.board.db import Store
    from hiveboard.board.knowledge import NewItem
    from hiveboard.board.messages import NewMessage
    from hiveboard.board.models import NewTask
    from hiveboard.board.tasks import Board

    home = tmp_path / "home"
    board = Board(Store(home / "hiveboard.db"))
    for name in ("lee", "alice", "bob"):
        board.agents.ensure(name)
    first = board.create("lee", NewTask(title="parse dates", labels=["api"], attempts=2))
    dep = board.create("lee", NewTask(title="after it", depends_on=[first.id]))
    claim = board.claim("alice", first.id)
    board.complete("alice", first.id, claim.token, "done", "parsed")
    board.messages.publish("bob", NewMessage(intent="info", recipient="alice", content="nice work"))
    older = board.knowledge.remember(
        "lee", [NewItem(kind="lesson", text="Problem: x\nFix: old advice", task_type="code")]
    )[0]
    newer = board.knowledge.remember(
        "lee", [NewItem(kind="lesson", text="Problem: x\nFix: new advice", task_type="code")]
    )[0]
    with board.store.write() as db:
        board.knowledge.supersede(db, older.id, newer.id)  # a row that names a later row of its table
    cards = {t.id: board.get(t.id).model_dump() for t in board.list(limit=50).tasks}
    board.store.close()

    url = postgres.database()
    done = run_cli("--home", str(home), "migrate", "--to", "-", env=clean_env(HIVEBOARD_MIGRATE_TO=url))
    assert done.returncode == 0, done.stderr
    lines = [
        line
        for line in done.stdout.splitlines()
        if line.split()[:1]
        and line.split()[0] in ("agents", "tasks", "task_history", "messages", "inbox", "memory_items")
    ]
    assert len(lines) == 6 and all(line.endswith("same") for line in lines), done.stdout
    copied = Board(Store(url))
    try:
        assert {t.id: copied.get(t.id).model_dump() for t in copied.list(limit=50).tasks} == cards
        assert (
            copied.create("lee", NewTask(title="new on postgresql")).id == dep.id + 1
        )  # ids continue after the copied ones
        assert copied.knowledge.pending() >= 2  # queued for the target's vector index
    finally:
        copied.store.close()
    again = run_cli("--home", str(home), "migrate", "--to", "-", env=clean_env(HIVEBOARD_MIGRATE_TO=url))
    assert again.returncode == 2 and "already holds a board" in again.stderr and url not in again.stderr


async def test_a_node_killed_mid_burst_loses_no_acknowledged_write(postgres, chroma_server, tmp_path):
    """Four clients write through node one while it is killed (SIGKILL); every card it acknowledged is on
    the board, as node two sees it, and nothing half-written is."""
    from conftest import serve_http, stop_process

    url = postgres.database()
    env = clean_env(HIVEBOARD_DB=url, HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_REVIEW__ENABLED="false")
    tokens = {}
    for name in ("w0", "w1", "w2", "w3", "reader"):
        made = run_cli("--home", str(tmp_path / "one"), "agent", "add", name, env=env)
        tokens[name] = made.stdout.strip()
    one, one_url = serve_http(tmp_path / "one", env=env)
    two, two_url = serve_http(tmp_path / "two", env=env)
    acknowledged: list[int] = []
    try:

        async def writer(name: str) -> None:
            try:
                async with http_client(one_url, tokens[name]) as c:
                    for n in range(1000):
                        acknowledged.append((await call(c, "create_task", title=f"{name} {n}"))["id"])
            except Exception:  # the node died under it: what it had acknowledged is what counts
                return

        async with anyio.create_task_group() as tg:
            for name in ("w0", "w1", "w2", "w3"):
                tg.start_soon(writer, name)
            with anyio.fail_after(120):
                while len(acknowledged) < 40:
                    await anyio.sleep(0.01)
            one.kill()  # SIGKILL, mid-burst
        async with http_client(two_url, tokens["reader"]) as c:
            page = await call(c, "list_tasks", limit=200)
            ids, cursor = [t["id"] for t in page["tasks"]], page.get("next_cursor")
            while cursor:
                page = await call(c, "list_tasks", limit=200, cursor=cursor)
                ids += [t["id"] for t in page["tasks"]]
                cursor = page.get("next_cursor")
        assert set(acknowledged) <= set(ids), sorted(set(acknowledged) - set(ids))
        assert len(ids) - len(acknowledged) <= 4  # at most one in flight per writer was committed unanswered
        # every card on the board is whole: its creation's history row is there too
        assert await anyio.to_thread.run_sync(_cards_without_history, url) == 0
    finally:
        one.kill()
        one.wait()
        stop_process(two)


def _cards_without_history(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM task_history h WHERE h.task_id = t.id "
            "AND h.action = 'created')"
        ).fetchone()[0]


async def test_a_node_out_of_connections_waits_then_says_so_and_reuses_what_is_handed_back(postgres):
    """With its pool of two connections held (one by this thread, which opened the board, one by a thread
    inside a transaction), a call waits pool_wait, then gets one sentence; once that thread ends its
    connection is handed back and the next call uses it: the node never opens a third."""
    import threading

    from mcp import Client

    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.server.app import build_server
    from hiveboard.server.identity import Identity

    url = postgres.database()
    board = Board(Store(url, pool=2, pool_wait=0.3))
    held, done = threading.Event(), threading.Event()

    def hold() -> None:  # a thread inside a write transaction, on the node's last free connection
        with board.store.write() as db:
            db.execute("SELECT 1")
            held.set()
            done.wait(30)

    try:
        board.agents.ensure("alice")
        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        async with Client(build_server(board, Identity(board.agents, "memory", agent="alice"))) as c:
            refused = await call_error(c, "create_task", title="waits for a connection")
            assert refused == (
                "create_task: all 2 database connections of this node are in use (waited 0.3 s); nothing was "
                "written; retry in a moment"
            )
            done.set()
            holder.join(10)
            made = await call(c, "create_task", title="after the hand-back")
        assert [t.title for t in board.list().tasks] == [made["title"]]  # the refused call wrote nothing
        assert await anyio.to_thread.run_sync(_connections, url) == 2
    finally:
        done.set()
        board.store.close()


def _connections(url: str) -> int:
    """The node's connections to its database (the application name it gives them)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hiveboard' AND datname = current_database()"
        ).fetchone()[0]


async def test_thirty_two_clients_share_a_node_of_four_connections(postgres, chroma_server, tmp_path):
    """Worker threads outnumber a small pool: each hands its connection back when its call is done (the
    token check included), so 32 agents calling at once through one node with 4 connections all get
    answers, and the node never holds more than 4."""
    from conftest import serve_http, stop_process

    url = postgres.database()
    env = clean_env(
        HIVEBOARD_DB=url, HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_REVIEW__ENABLED="false", HIVEBOARD_DB_POOL="4"
    )
    names = [f"a{n:02d}" for n in range(32)]
    tokens = {
        name: run_cli("--home", str(tmp_path / "node"), "agent", "add", name, env=env).stdout.strip() for name in names
    }
    node, node_url = serve_http(tmp_path / "node", env=env)
    most = 0
    try:

        async def agent(name: str) -> None:
            async with http_client(node_url, tokens[name]) as c:
                for n in range(5):
                    made = await call(c, "create_task", title=f"{name} {n}")
                    assert (await call(c, "claim_task", task_id=made["id"]))["claimed"]
                    await call(c, "get_board")

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, await anyio.to_thread.run_sync(_connections, url))
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with anyio.create_task_group() as agents:
                for name in names:
                    agents.start_soon(agent, name)
            tg.cancel_scope.cancel()
    finally:
        stop_process(node)
    assert 1 <= most <= 4, most
