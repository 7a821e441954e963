"""The `hiveboard` command line: board printout, agent tokens, tool costs, and its documentation."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import hiveboard_cmd

from hiveboard.board import Board, NewTask, Store
from hiveboard.server.cli import parser

README = Path(__file__).resolve().parents[2] / "README.md"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(hiveboard_cmd(*args), capture_output=True, text=True, timeout=60)


def test_board_prints_columns_and_cards(tmp_path):
    board = Board(Store(tmp_path / "hiveboard.db"))
    board.create("lead", NewTask(title="Design schema", priority="high"))
    board.create("lead", NewTask(title="Write API", depends_on=[1]))
    board.claim("alice", 1)
    out = run("--home", str(tmp_path), "board")
    assert out.returncode == 0, out.stderr
    assert "2 cards, 0 ready" in out.stdout
    assert re.search(r"IN_PROGRESS \(1\)\n\s+#1 .*Design schema @alice", out.stdout)
    assert re.search(r"TODO \(1\)\n\s+#2 .*Write API", out.stdout)
    assert "memory: 0 items; 0 handed to agents at claims, 0 marked helpful" in out.stdout


def test_agent_add_prints_a_working_token(tmp_path):
    out = run("--home", str(tmp_path), "agent", "add", "Alice", "--role", "coder")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("hb_")
    board = Board(Store(tmp_path / "hiveboard.db"))
    agent = board.agents.by_token(token)
    assert agent.name == "alice" and agent.role == "coder"
    assert "alice\tcoder" in run("--home", str(tmp_path), "agent", "list").stdout
    bad = run("--home", str(tmp_path), "agent", "add", "no spaces allowed")
    assert bad.returncode == 2 and "not valid" in bad.stderr


def test_tools_prints_each_tool_and_total_cost():
    out = run("tools")
    assert out.returncode == 0, out.stderr
    assert "claim_task" in out.stdout and re.search(r"total\s+\d+", out.stdout)


def test_every_cli_command_and_flag_is_in_the_readme():
    readme = README.read_text()
    p = parser()
    sub = next(a for a in p._actions if a.dest == "command")
    for name, subparser in sub.choices.items():
        assert f"hiveboard {name}" in readme or f"`{name}`" in readme, f"command {name} not documented"
        for action in subparser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in readme, f"{name} {flag} not documented"


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


def test_serve_refuses_an_index_of_another_model_and_reindex_repairs_it(tmp_path):
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.index import VectorIndex, chroma_client

    assert run("--home", str(tmp_path), "reindex").returncode == 0  # an index for the offline model
    # as if it had been built with another model
    chroma_client(tmp_path / "chroma").get_collection("hiveboard_memory").modify(
        metadata={"hiveboard_model": "text-embedding-3-large", "hiveboard_dim": 3072})
    serve = run("--home", str(tmp_path), "serve", "--http", "--port", "1")
    assert serve.returncode == 2 and "hiveboard reindex" in serve.stderr
    fixed = run("--home", str(tmp_path), "reindex")
    assert fixed.returncode == 0 and "all-MiniLM-L6-v2-onnx-int8 (384-d)" in fixed.stdout
    VectorIndex(get_embedder(), path=tmp_path / "chroma")  # opens without complaint again
