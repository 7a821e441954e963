"""Optional parts without their extra installed (pyproject's `postgres` and `llm`): each is refused in one sentence
that names the extra, at the point where it is set up, not with an ImportError. The packages are made
unimportable here (None in sys.modules); tests/server/test_startup.py checks that the default commands import
none of them."""

from __future__ import annotations

import os
import sys

import pytest

from hiveboard.board.db import Store
from hiveboard.board.errors import MissingExtra
from hiveboard.board.tasks import Board
from hiveboard.critics.config import Endpoint, ReviewConfig
from hiveboard.critics.engine import ReviewEngine
from hiveboard.critics.llm import LLMCritic
from hiveboard.memory.embeddings import OpenAIEmbedder, get_embedder

URL = "postgresql://nobody@127.0.0.1:1/board"
POSTGRES = "PostgreSQL as the store needs the psycopg package: pip install 'hiveboard[postgres]'"


@pytest.fixture
def environ(monkeypatch):
    for name in list(os.environ):
        if name.startswith("HIVEBOARD_"):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("package", ["psycopg"])
def test_a_postgresql_store_without_the_postgres_extra_names_it(monkeypatch, package):
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(MissingExtra) as refused:
        Store(URL)
    assert str(refused.value) == POSTGRES.replace("psycopg", package)


@pytest.mark.parametrize("command", [["serve", "--http"], ["doctor"], ["agent", "list"]])
def test_the_command_line_refuses_a_postgresql_url_without_the_extra_in_one_sentence(
    tmp_path, environ, capsys, command
):
    from hiveboard.server.cli import main

    environ.setitem(sys.modules, "psycopg", None)
    assert main(["--home", str(tmp_path / "home"), "--db", URL, *command]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"hiveboard: {POSTGRES}\n"), err
    assert not (tmp_path / "home").exists()


def test_an_llm_critic_without_the_llm_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingExtra, match=r"^an LLM critic needs the openai package: pip install 'hiveboard\[llm\]'$"):
        LLMCritic("llm-correctness", "correctness", "", Endpoint(model="llama3.1"), 10, 1)


def test_a_server_configured_with_llm_critics_is_refused_at_start_without_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    board = Board(Store(tmp_path / "board.db"))
    try:
        with pytest.raises(MissingExtra, match=r"hiveboard\[llm\]"):
            ReviewEngine(board, ReviewConfig(llm=Endpoint(model="llama3.1")), None)
        ReviewEngine(board, ReviewConfig(), None)  # the offline critics need no extra
    finally:
        board.store.close()


def test_openai_compatible_embeddings_without_the_llm_extra_name_it(tmp_path, environ, capsys):
    from hiveboard.server.cli import main

    environ.setitem(sys.modules, "openai", None)
    sentence = "an OpenAI-compatible embedding model needs the openai package: pip install 'hiveboard[llm]'"
    with pytest.raises(MissingExtra) as refused:
        OpenAIEmbedder("nomic-embed-text", "http://127.0.0.1:1/v1")
    assert str(refused.value) == sentence
    with pytest.raises(MissingExtra):
        get_embedder("nomic-embed-text", "http://127.0.0.1:1/v1")
    environ.setenv("HIVEBOARD_EMBEDDING_BASE_URL", "http://127.0.0.1:1/v1")
    environ.setenv("HIVEBOARD_EMBEDDING_MODEL", "nomic-embed-text")
    assert main(["--home", str(tmp_path / "home"), "serve", "--http"]) == 2
    assert capsys.readouterr().err.endswith(f"hiveboard: {sentence}\n")
