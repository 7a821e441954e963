"""Critic configuration as docs/reference.md documents it: every TOML example loads, and bad ones say why."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, hiveboard_cmd

from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine
from hiveboard.critics.policy import kinds_of
from hiveboard.server.config import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def reference_toml_blocks() -> list[str]:
    text = REFERENCE.read_text()
    review = text[text.index("### Configuring critics") : text.index("### The critique schema")]
    return re.findall(r"```toml\n(.*?)```", review, re.S)


def settings_from(tmp_path: Path, toml: str, monkeypatch) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text(toml)
    monkeypatch.setenv("HIVEBOARD_CONFIG", str(path))
    return Settings(home=tmp_path)


def test_every_documented_example_loads(tmp_path, monkeypatch, board):
    blocks = reference_toml_blocks()
    assert len(blocks) == 3
    openai_, ollama, full = (settings_from(tmp_path, b, monkeypatch).review for b in blocks)
    assert openai_.all_critics()["llm-security"].model == "gpt-4o-mini"
    assert ollama.all_critics()["llm-clarity"].base_url == "http://localhost:11434/v1"
    critics = full.all_critics()
    assert "ruff-style" not in critics and critics["licensing-local"].lens == "licensing"
    assert full.lenses_for("code")[-1] == "licensing" and full.rubric("licensing").startswith("Licensing only")
    assert full.execute and full.synthesis.backend == "llm"
    assert "docs/**" in full.path_table["docs"] and full.path_table["test"] == ReviewConfig().path_table["test"]
    engine = ReviewEngine(board, full)  # builds every critic, the LLM ones with their own clients
    assert {"security-gpt", "licensing-local", "bandit", "acceptance"} <= set(engine.critics)
    assert engine.critics["licensing-local"].client.base_url.host == "localhost"


def test_environment_variables_reach_the_review_table(tmp_path, monkeypatch):
    monkeypatch.setenv("HIVEBOARD_REVIEW__EXECUTE", "true")
    monkeypatch.setenv("HIVEBOARD_REVIEW__MAX_ROUNDS", "5")
    monkeypatch.setenv("HIVEBOARD_REVIEW__LLM__MODEL", "llama3.1")
    review = settings_from(tmp_path, "", monkeypatch).review
    assert review.execute and review.max_rounds == 5 and review.all_critics()["llm-tests"].model == "llama3.1"


@pytest.mark.parametrize(
    "toml, says",
    [
        ('[review.critics.x]\nlens = "security"\nbackend = "llm"\n', "an llm critic needs model="),
        ("[review]\nmax_rounds = 0\n", "max_rounds"),
        (
            '[review.critics.x]\nlens = "security"\nbackend = "gpt"\n',
            "'llm', 'ruff', 'bandit', 'acceptance' or 'integrity'",
        ),
        ('[review.paths]\n"Big Kind" = ["*.x"]\n', "is not a task type"),
    ],
)
def test_a_bad_configuration_stops_the_server_with_the_reason(tmp_path, toml, says):
    (tmp_path / "config.toml").write_text(toml)
    done = subprocess.run(
        hiveboard_cmd("--home", str(tmp_path), "serve"),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    # one sentence naming the file and the setting
    assert "config.toml" in done.stderr and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_every_backend_a_config_may_name_has_a_builder():
    from typing import get_args

    from hiveboard.critics.config import Backend
    from hiveboard.critics.engine import BACKENDS

    assert set(get_args(Backend)) == set(BACKENDS)


@pytest.mark.parametrize(
    "path, kinds",
    [
        ("calc.py", ["code"]),
        ("src/pkg/calc.py", ["code"]),
        ("tests/test_calc.py", ["code", "test"]),
        ("pkg/tests/data/case.json", ["test"]),
        ("README.md", ["docs"]),
        ("requirements-dev.txt", ["code", "docs"]),
        ("Makefile", []),  # no pattern: a commit's unmatched kind (code)
        ("docs/guide.md", ["docs"]),
        ("SRC/CALC.PY", ["code"]),
    ],
)
def test_paths_are_classified_as_gitignore_reads_patterns(path, kinds):
    assert kinds_of(ReviewConfig().path_table, path) == kinds
