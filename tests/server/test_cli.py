"""The `hiveboard` command line: board printout, agent tokens, the memory's file and vector index, tool
costs, and its documentation. The commands that read or write a board run on a SQLite board and on a
PostgreSQL one (HIVEBOARD_DB, with the Chroma server such a board's memory needs)."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import START_TIMEOUT, call, clean_env, free_port, hiveboard_cmd, run_cli, stop_process

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board
from hiveboard.server.cli import parser

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"

pytestmark = pytest.mark.backends("sqlite", "postgresql")  # for the tests that take a board


def open_memory_of(board: Board, home: Path, env: dict[str, str]):
    """The memory a node with this environment and data directory opens (embedded, or on the Chroma server)."""
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.service import open_memory

    return open_memory(
        board,
        get_embedder(),
        home,
        chroma_url=env.get("HIVEBOARD_CHROMA_URL"),
        collection=env.get("HIVEBOARD_CHROMA_COLLECTION"),
    )


def test_board_prints_columns_and_cards(tmp_path, board, node_env):
    board.create("lead", NewTask(title="Design schema", priority="high"))
    board.create("lead", NewTask(title="Write API", depends_on=[1]))
    board.claim("alice", 1)
    out = run_cli("--home", str(tmp_path), "board", env=node_env)
    assert out.returncode == 0, out.stderr
    assert "2 cards, 0 ready" in out.stdout
    assert re.search(r"IN_PROGRESS \(1\)\n\s+#1 .*Design schema @alice", out.stdout)
    assert re.search(r"TODO \(1\)\n\s+#2 .*Write API", out.stdout)
    assert (
        "memory: 0 items, 0 waiting for the vector index; 0 handed to agents at claims, 0 marked helpful" in out.stdout
    )


def test_agent_add_prints_a_working_token(tmp_path, board, node_env):
    out = run_cli("--home", str(tmp_path), "agent", "add", "Alice", "--role", "coder", env=node_env)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("hb_")
    agent = board.agents.by_token(token)
    assert agent.name == "alice" and agent.role == "coder"
    assert "alice\tcoder" in run_cli("--home", str(tmp_path), "agent", "list", env=node_env).stdout
    bad = run_cli("--home", str(tmp_path), "agent", "add", "no spaces allowed", env=node_env)
    assert bad.returncode == 2 and "not valid" in bad.stderr


def canary_line(n: int, hidden: bool = True) -> str:
    return json.dumps(
        {
            "title": f"Double the value {n}",
            "acceptance_criteria": [f"double({n}) == {2 * n}"],
            "acceptance_tests": {
                "files": [
                    {
                        "name": "test_double.py",
                        "content": f"from double import double\nassert double({n}) == {2 * n + 1}\n",
                    }
                ],
                "hidden": hidden,
            },
        }
    )


def test_canary_add_makes_picked_canaries_as_a_person_and_nothing_when_one_card_is_wrong(tmp_path, board, node_env):
    board.agents.new_token("lee", "human")
    board.agents.new_token("bob", "coder")
    cards = tmp_path / "canaries.jsonl"
    cards.write_text("\n".join(canary_line(n) for n in range(1, 6)) + "\n")
    out = run_cli("--home", str(tmp_path), "canary", "add", str(cards), "--as", "lee", "--pick", "2", env=node_env)
    assert out.returncode == 0, out.stderr
    made = [int(n) for n in re.findall(r"#(\d+)", out.stdout)]
    assert len(made) == 2 and out.stdout.startswith("made 2 canary card(s) as lee")
    with board.store.read() as db:
        assert all(board.canaries.is_canary(db, n) for n in made)
    assert {board.get(n).created_by for n in made} == {"lee"}
    # refused, nothing made: an agent that is not a person, a card without hidden tests, an unknown field
    refused = run_cli("--home", str(tmp_path), "canary", "add", str(cards), "--as", "bob", env=node_env)
    assert refused.returncode == 2 and "only a person" in refused.stderr and "nothing was made" in refused.stderr
    cards.write_text(canary_line(7) + "\n" + canary_line(8, hidden=False) + "\n")
    refused = run_cli("--home", str(tmp_path), "canary", "add", str(cards), "--as", "lee", env=node_env)
    assert refused.returncode == 2 and "hidden" in refused.stderr and "nothing was made" in refused.stderr
    cards.write_text(json.dumps({"title": "t", "hiden": True}) + "\n")
    refused = run_cli("--home", str(tmp_path), "canary", "add", str(cards), "--as", "lee", env=node_env)
    assert refused.returncode == 2 and "line 1" in refused.stderr and "'hiden'" in refused.stderr
    with board.store.read() as db:
        assert db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 2


def test_tools_prints_each_tool_and_total_cost():
    out = run_cli("tools")
    assert out.returncode == 0, out.stderr
    assert "claim_task" in out.stdout and re.search(r"total\s+\d+", out.stdout)


def test_every_cli_command_and_flag_is_in_the_reference():
    reference = REFERENCE.read_text()
    p = parser()
    sub = next(a for a in p._actions if a.dest == "command")
    for name, subparser in sub.choices.items():
        assert f"hiveboard {name}" in reference or f"`{name}`" in reference, f"command {name} not documented"
        for action in subparser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in reference, f"{name} {flag} not documented"


def test_every_command_and_option_is_described_and_every_command_listed_in_the_readme():
    readme = (REFERENCE.parents[1] / "README.md").read_text()
    commands = readme[readme.index("## Commands") :].split("\n## ")[0]
    p = parser()
    sub = next(a for a in p._actions if a.dest == "command")
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    for name, subparser in sub.choices.items():
        assert f"`hiveboard {name}" in commands, f"hiveboard {name} is not in the README's command list"
        assert helps.get(name) and subparser.description, f"hiveboard {name} has no description"
        for action in subparser._actions:
            assert action.help, f"hiveboard {name} {'/'.join(action.option_strings) or action.dest} is not described"
    db = next(a for a in p._actions if a.dest == "db")
    assert "postgresql://" in db.help


def test_message_size_limit_is_configurable(tmp_path, monkeypatch):
    from hiveboard.board.errors import InvalidInput
    from hiveboard.board.messages import NewMessage
    from hiveboard.board.models import NewTask
    from hiveboard.server.cli import open_board
    from hiveboard.server.config import Settings

    monkeypatch.setenv("HIVEBOARD_MAX_MESSAGE_CHARS", "500")
    board = open_board(Settings(home=tmp_path))
    board.agents.ensure("a")
    board.create("a", NewTask(title="t"))
    board.messages.publish("a", NewMessage(intent="info", content="x" * 500, task_id=1))
    with pytest.raises(InvalidInput, match="limit is 500"):
        board.messages.publish("a", NewMessage(intent="info", content="x" * 501, task_id=1))


@pytest.mark.slow
@pytest.mark.anyio
async def test_serve_refuses_an_index_of_another_model_and_reindex_repairs_it(tmp_path, board, connect, node_env):
    """The index is the embedded Chroma of the data directory, or a collection on the Chroma server."""
    from hiveboard.board.knowledge import NewItem
    from hiveboard.memory.index import COLLECTION, chroma_client

    (note,) = board.knowledge.remember(
        "lee", [NewItem(kind="note", text="Staging is reset every Sunday at 02:00 UTC.")]
    )
    built = run_cli("--home", str(tmp_path), "reindex", env=node_env)  # an index for the offline model
    assert built.returncode == 0 and "reindexed 1 memory items" in built.stdout, built.stderr
    chroma_url = node_env.get("HIVEBOARD_CHROMA_URL")
    client = chroma_client(url=chroma_url) if chroma_url else chroma_client(tmp_path / "chroma")
    # as if it had been built with another model
    client.get_collection(node_env.get("HIVEBOARD_CHROMA_COLLECTION", COLLECTION)).modify(
        metadata={"hiveboard_model": "text-embedding-3-large", "hiveboard_dim": 3072}
    )
    serve = run_cli("--home", str(tmp_path), "serve", "--http", "--port", "0", env=node_env)
    assert serve.returncode == 2 and "hiveboard reindex" in serve.stderr
    fixed = run_cli("--home", str(tmp_path), "reindex", env=node_env)
    assert fixed.returncode == 0 and "reindexed 1 memory items with" in fixed.stdout, fixed.stderr
    assert "all-MiniLM-L6-v2-onnx-int8 (384-d)" in fixed.stdout
    memory = open_memory_of(board, tmp_path, node_env)  # opens without complaint again
    try:
        assert memory.pending() == 0
        async with connect("lee", memory=memory) as c:
            found = await call(c, "query_memory", query="when is the test environment wiped", mode="vector")
        assert found["hits"][0]["id"] == note.id, found  # found by meaning: the two share no word
    finally:
        memory.stop()


@pytest.mark.slow
@pytest.mark.anyio
async def test_memory_export_imports_into_a_postgresql_board_as_the_same_items(
    tmp_path, board, connect, node_env, postgres, chroma_server
):
    """From a SQLite board or a PostgreSQL one into another PostgreSQL database: the same items, ids, links,
    authors and times, indexed on the Chroma server by the import and found by meaning there."""
    source = open_memory_of(board, tmp_path, node_env)
    try:
        async with connect("alice", memory=source) as c:
            await call(
                c,
                "remember",
                items=[
                    {"text": "Staging is reset every Sunday at 02:00 UTC.", "task_type": "ops", "tags": ["staging"]},
                    {"kind": "snippet", "title": "backoff", "text": "for n in range(5):\n    sleep(2 ** n)"},
                    {
                        "kind": "document",
                        "text": "Café menu — naïve façade, 日本語, emoji \U0001f525\n" + "line\n" * 300,
                    },
                ],
            )
            lesson = dict(problem="Tests hit the real payment API.", task_type="test")
            old = await call(c, "record_lesson", fix="Skip them in CI.", **lesson)
            await call(c, "record_lesson", fix="Run a local fake of it.", supersedes=old["item"]["id"], **lesson)
            await call(c, "create_task", title="Set up staging")
            await call(c, "publish_message", intent="info", task_id=1, content="Staging uses Postgres 15.")
    finally:
        source.stop()
    dump = tmp_path / "memory.jsonl"
    exported = run_cli("--home", str(tmp_path), "memory", "export", str(dump), env=node_env)
    assert exported.returncode == 0 and "exported 6 memory items" in exported.stderr, exported.stderr
    lines = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert lines[3]["superseded_by"] == lines[4]["id"] and lines[5]["source"] == "message:1"

    url, collection = postgres.database(), f"t{uuid.uuid4().hex[:16]}"
    target = clean_env(HIVEBOARD_DB=url, HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_CHROMA_COLLECTION=collection)
    other = tmp_path / "other"
    imported = run_cli("--home", str(other), "memory", "import", str(dump), env=target)
    assert imported.returncode == 0, imported.stderr
    assert "imported 6 memory items" in imported.stderr and "all items are indexed by meaning" in imported.stderr
    again = run_cli("--home", str(other), "memory", "export", env=target)  # to stdout
    assert again.returncode == 0, again.stderr
    # the same items, ids, links, authors and times; what came in through a file is imported, whatever it said
    assert [json.loads(line) for line in again.stdout.splitlines()] == [{**item, "trust": "imported"} for item in lines]
    assert not (other / "chroma").exists()  # the vectors went to the Chroma server, not beside the node

    copy = Board(Store(url))
    memory = open_memory_of(copy, other, target)
    try:
        assert copy.knowledge.pending() == 0  # the import indexed what it wrote
        hits = memory.query("when is staging wiped", mode="vector").hits
        assert hits[0].kind == "note" and hits[0].title.startswith("Staging is reset")
        payment = memory.query("payment API tests", kinds=["lesson"], include_deprecated=True).hits
        replaced = next(h for h in payment if h.deprecated)
        assert replaced.superseded_by == next(h.id for h in payment if not h.deprecated)
    finally:
        memory.stop()
        copy.store.close()


def test_on_postgresql_no_command_indexes_into_a_chroma_of_its_node_alone(postgres, tmp_path):
    """Without HIVEBOARD_CHROMA_URL, `reindex` refuses, as `serve` does, and `memory import` stores the items
    and leaves them queued for the nodes that serve the board (whose index is the shared one)."""
    env = clean_env(HIVEBOARD_DB=postgres.database())
    home = tmp_path / "home"
    dump = tmp_path / "memory.jsonl"
    dump.write_text(json.dumps({"text": "Staging is reset every Sunday at 02:00 UTC."}) + "\n", encoding="utf-8")
    imported = run_cli("--home", str(home), "memory", "import", str(dump), env=env)
    assert imported.returncode == 0 and "imported 1 memory items" in imported.stderr, imported.stderr
    assert "not indexed by meaning yet" in imported.stderr and "HIVEBOARD_CHROMA_URL" in imported.stderr
    shown = run_cli("--home", str(home), "board", env=env)
    assert "memory: 1 items, 1 waiting for the vector index" in shown.stdout, shown.stdout + shown.stderr
    reindex = run_cli("--home", str(home), "reindex", env=env)
    assert reindex.returncode == 2 and "HIVEBOARD_CHROMA_URL" in reindex.stderr and reindex.stdout == ""
    assert run_cli("--home", str(home), "board", env=env).stdout == shown.stdout  # still queued
    assert not (home / "chroma").exists()


def test_the_data_directory_and_database_are_private(tmp_path, node_env):
    """On PostgreSQL the data directory still holds the web board's signing secret and the config file."""
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "agent", "add", "alice", env=node_env).returncode == 0
    assert home.stat().st_mode & 0o777 == 0o700
    for name in ("hiveboard.db", "hiveboard.db-wal", "hiveboard.db-shm"):
        if (home / name).exists():
            assert (home / name).stat().st_mode & 0o777 == 0o600, name
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    assert run_cli("--home", str(loose), "agent", "list", env=node_env).returncode == 0
    assert loose.stat().st_mode & 0o777 == 0o700  # an existing data directory is tightened


def test_a_lost_token_is_replaced_by_the_operator(tmp_path, board, node_env):
    first = run_cli("--home", str(tmp_path), "agent", "add", "alice", env=node_env).stdout.strip()
    again = run_cli("--home", str(tmp_path), "agent", "token", "alice", env=node_env)
    assert again.returncode == 0 and again.stdout.strip().startswith("hb_")
    assert board.agents.by_token(first) is None and board.agents.by_token(again.stdout.strip()).name == "alice"
    unknown = run_cli("--home", str(tmp_path), "agent", "token", "nobody", env=node_env)
    assert unknown.returncode == 2 and "hiveboard agent add nobody" in unknown.stderr


def test_the_http_token_comes_from_a_file_and_a_command_line_token_is_warned_about(tmp_path):
    from hiveboard.server.cli import _settings

    secret = tmp_path / "token"
    secret.write_text("team-secret\n")
    assert (
        _settings(parser().parse_args(["--home", str(tmp_path), "serve", "--token-file", str(secret)])).http_token
        == "team-secret"
    )
    out = subprocess.run(
        hiveboard_cmd("--home", str(tmp_path), "serve", "--http", "--port", "1", "--token", "x", "--host", "256.0.0.1"),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )
    assert "visible to every local user" in out.stderr


def test_board_into_a_pipe_that_closes_early_ends_quietly(tmp_path, board, node_env):
    for n in range(20):
        board.create("lead", NewTask(title=f"card {n}"))
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(tmp_path), "board"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        env=node_env,
    )
    proc.stdout.close()  # `hiveboard board | true`: the reader is gone before the board is printed
    assert proc.wait(timeout=START_TIMEOUT) == 0
    assert "Traceback" not in proc.stderr.read().decode()


def test_serve_refuses_a_taken_port_before_saying_it_serves(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = run_cli("--home", str(tmp_path), "serve", "--http", "--port", str(taken.getsockname()[1]))
    assert out.returncode == 2 and "cannot serve on 127.0.0.1" in out.stderr and "serving" not in out.stderr


def _pump(stream) -> queue.Queue[str]:
    """The stream's lines on a queue, read by a daemon thread; "" once it ends."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


def _read_until(lines: queue.Queue[str], text: str, seen: list[str], within: float = 60) -> bool:
    """Take lines until `text` appears (True), or the stream ends or `within` seconds pass (False)."""
    deadline = time.monotonic() + within
    while True:
        try:
            chunk = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if not chunk:
            return False
        seen.append(chunk)
        if text in chunk:
            return True


def test_board_watch_redraws_when_another_process_changes_the_board(tmp_path, board, node_env):
    board.create("alice", NewTask(title="first card", task_type="code"))
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(tmp_path), "board", "--watch"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=node_env,
        # Ctrl-C as a terminal gives it, also when the suite itself runs with SIGINT ignored (a background job)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen: list[str] = []
    lines = _pump(proc.stdout)
    try:
        assert _read_until(lines, "(live,", seen), "".join(seen)
        assert "first card" in "".join(seen)
        seen.clear()
        board.create("alice", NewTask(title="second card, seen live", task_type="code"))
        assert _read_until(lines, "second card, seen live", seen), "".join(seen)
        assert "\x1b[2J" in "".join(seen)  # redrawn in place, not appended
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode in (0, -signal.SIGINT, 1), proc.stderr.read()


def test_web_serves_the_board_and_says_where(tmp_path, node_env):
    home = tmp_path / "home"
    port = free_port()
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(home), "web", "--no-browser", "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=node_env,
    )
    seen: list[str] = []
    try:
        assert _read_until(_pump(proc.stderr), "the web board is at", seen, within=START_TIMEOUT), "".join(seen)
        assert f"http://127.0.0.1:{port}/" in seen[-1]
        answer = httpx.get(f"http://127.0.0.1:{port}/board", follow_redirects=False, timeout=60)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
        assert "token" in httpx.get(f"http://127.0.0.1:{port}/login", timeout=60).text
    finally:
        stop_process(proc)
