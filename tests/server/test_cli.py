"""The `hiveboard` command line: board printout, agent tokens, tool costs, and its documentation."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import START_TIMEOUT, free_port, hiveboard_cmd, run_cli, stop_process

from hiveboard.board import Board, NewTask, Store
from hiveboard.server.cli import parser

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_board_prints_columns_and_cards(tmp_path):
    board = Board(Store(tmp_path / "hiveboard.db"))
    board.create("lead", NewTask(title="Design schema", priority="high"))
    board.create("lead", NewTask(title="Write API", depends_on=[1]))
    board.claim("alice", 1)
    out = run_cli("--home", str(tmp_path), "board")
    assert out.returncode == 0, out.stderr
    assert "2 cards, 0 ready" in out.stdout
    assert re.search(r"IN_PROGRESS \(1\)\n\s+#1 .*Design schema @alice", out.stdout)
    assert re.search(r"TODO \(1\)\n\s+#2 .*Write API", out.stdout)
    assert (
        "memory: 0 items, 0 waiting for the vector index; 0 handed to agents at claims, 0 marked helpful" in out.stdout
    )


def test_agent_add_prints_a_working_token(tmp_path):
    out = run_cli("--home", str(tmp_path), "agent", "add", "Alice", "--role", "coder")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("hb_")
    board = Board(Store(tmp_path / "hiveboard.db"))
    agent = board.agents.by_token(token)
    assert agent.name == "alice" and agent.role == "coder"
    assert "alice\tcoder" in run_cli("--home", str(tmp_path), "agent", "list").stdout
    bad = run_cli("--home", str(tmp_path), "agent", "add", "no spaces allowed")
    assert bad.returncode == 2 and "not valid" in bad.stderr


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


def test_message_size_limit_is_configurable(tmp_path, monkeypatch):
    from hiveboard.board import InvalidInput, NewTask
    from hiveboard.board.messages import NewMessage
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
def test_serve_refuses_an_index_of_another_model_and_reindex_repairs_it(tmp_path):
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.index import VectorIndex, chroma_client

    assert run_cli("--home", str(tmp_path), "reindex").returncode == 0  # an index for the offline model
    # as if it had been built with another model
    chroma_client(tmp_path / "chroma").get_collection("hiveboard_memory").modify(
        metadata={"hiveboard_model": "text-embedding-3-large", "hiveboard_dim": 3072}
    )
    serve = run_cli("--home", str(tmp_path), "serve", "--http", "--port", "1")
    assert serve.returncode == 2 and "hiveboard reindex" in serve.stderr
    fixed = run_cli("--home", str(tmp_path), "reindex")
    assert fixed.returncode == 0 and "all-MiniLM-L6-v2-onnx-int8 (384-d)" in fixed.stdout
    VectorIndex(get_embedder(), path=tmp_path / "chroma")  # opens without complaint again


def test_the_data_directory_and_database_are_private(tmp_path):
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "agent", "add", "alice").returncode == 0
    assert home.stat().st_mode & 0o777 == 0o700
    for name in ("hiveboard.db", "hiveboard.db-wal", "hiveboard.db-shm"):
        if (home / name).exists():
            assert (home / name).stat().st_mode & 0o777 == 0o600, name
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    run_cli("--home", str(loose), "agent", "list")
    assert loose.stat().st_mode & 0o777 == 0o700  # an existing data directory is tightened


def test_a_lost_token_is_replaced_by_the_operator(tmp_path):
    first = run_cli("--home", str(tmp_path), "agent", "add", "alice").stdout.strip()
    again = run_cli("--home", str(tmp_path), "agent", "token", "alice")
    assert again.returncode == 0 and again.stdout.strip().startswith("hb_")
    board = Board(Store(tmp_path / "hiveboard.db"))
    assert board.agents.by_token(first) is None and board.agents.by_token(again.stdout.strip()).name == "alice"
    unknown = run_cli("--home", str(tmp_path), "agent", "token", "nobody")
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


def test_board_into_a_pipe_that_closes_early_ends_quietly(tmp_path):
    board = Board(Store(tmp_path / "hiveboard.db"))
    for n in range(20):
        board.create("lead", NewTask(title=f"card {n}"))
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(tmp_path), "board"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
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


def test_board_watch_redraws_when_another_process_changes_the_board(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    board = Board(Store(home / "hiveboard.db"))
    board.create("alice", NewTask(title="first card", task_type="code"))
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(home), "board", "--watch"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
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


def test_web_serves_the_board_and_says_where(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    proc = subprocess.Popen(
        hiveboard_cmd("--home", str(home), "web", "--no-browser", "--port", str(port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
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
