"""A broken set-up, as an operator meets it through the `hiveboard` command: one sentence on stderr naming
the directory, file or setting and what to do, exit status 2, and nothing created or changed. Also the
rough edges around it: config typos, `hiveboard doctor`, options after the command, roles, table headers,
progress in a log, and `web` on a taken port."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import START_TIMEOUT, clean_env, hiveboard_cmd

from hiveboard.board.db import Store
from hiveboard.board.knowledge import NewItem
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board
from hiveboard.server.config import SetupError, load_settings
from hiveboard.server.memory_file import Progress

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def cli(*args: str, env: dict | None = None, user: list[str] = ()) -> subprocess.CompletedProcess:
    """`hiveboard ARGS` in an environment without the outer shell's HIVEBOARD_* settings (plus `env`)."""
    return subprocess.run(
        [*user, *hiveboard_cmd(*args)],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        env=clean_env(**(env or {})),
        stdin=subprocess.DEVNULL,
    )


def listing(root: Path) -> dict[str, tuple[int, ...]]:
    """Every file and directory from `root` down, to show that nothing was made, changed or removed: each
    file's mode, size and modification time, each directory's mode. (Not a directory's modification time:
    SQLite makes and removes a -wal and -shm file beside a database it opens, even one it then finds
    damaged, where the directory is writable.)"""
    found = {}
    for path in [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]:
        stat = path.lstat()
        name = str(path.relative_to(root)) if path != root else "."
        found[name] = (stat.st_mode,) if path.is_dir() else (stat.st_mode, stat.st_size, stat.st_mtime_ns)
    return found


def refused(out: subprocess.CompletedProcess, sentence: str) -> None:
    """The command stopped with exit status 2 and exactly this one sentence on stderr."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr == f"hiveboard: {sentence}\n", out.stderr
    assert "Traceback" not in out.stderr


def a_board(home: Path) -> Path:
    """A data directory holding a board with a card, an agent and a memory item; its database file."""
    home.mkdir(parents=True, exist_ok=True)
    board = Board(Store(home / "hiveboard.db"))
    board.create("lead", NewTask(title="Design schema", priority="high"))
    board.agents.new_token("alice", "coder")
    with board.store.write() as db:
        board.knowledge.add_many(db, [NewItem(text="retry flaky tests once", title="flaky tests")], "lead")
    board.store.close()
    return home / "hiveboard.db"


# ---------------------------------------------------------------- the data directory is a file

A_FILE = "the data directory {home} is a file, not a directory; point --home or HIVEBOARD_HOME at a directory (or move the file away)"


@pytest.mark.parametrize(
    "command", [["board"], ["agent", "add", "bob"], ["agent", "list"], ["memory", "export"], ["serve"], ["reindex"]]
)
def test_a_data_directory_that_is_a_file_is_refused(tmp_path, command):
    home = tmp_path / "notes.txt"
    home.write_text("not a directory\n")
    before = listing(tmp_path)
    refused(cli("--home", str(home), *command), A_FILE.format(home=home))
    assert listing(tmp_path) == before and home.read_text() == "not a directory\n"


def test_hiveboard_home_naming_a_file_is_refused_too(tmp_path):
    home = tmp_path / "notes.txt"
    home.write_text("x")
    before = listing(tmp_path)
    refused(cli("board", env={"HIVEBOARD_HOME": str(home)}), A_FILE.format(home=home))
    inside = home / "board"  # a data directory below a file cannot be made either
    refused(
        cli("agent", "add", "bob", env={"HIVEBOARD_HOME": str(inside)}),
        f"the data directory {inside} cannot be made: {home} is a file, not a directory; point --home or "
        "HIVEBOARD_HOME at a directory (or move the file away)",
    )
    assert listing(tmp_path) == before


# ---------------------------------------------------------------- a read-only data directory


@dataclass
class Lock:
    """A way to make a directory read-only that the CLI's user respects: root ignores file permissions, so as
    root the directory is made immutable (chattr +i) or the CLI runs as the user nobody."""

    how: str  # "chmod" (not root), "chattr" or "nobody"
    base: Path  # where the test's data directories go (somewhere the CLI's user can reach)

    @property
    def user(self) -> list[str]:
        return NOBODY if self.how == "nobody" else []

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return cli(*args, env=env, user=self.user)

    @contextmanager
    def read_only(self, home: Path):
        if self.how == "chmod":
            home.chmod(0o555)
            try:
                yield
            finally:
                home.chmod(0o700)
        elif self.how == "chattr":
            subprocess.run(["chattr", "+i", str(home)], check=True)
            try:
                yield
            finally:
                subprocess.run(["chattr", "-i", str(home)], check=True)
        else:  # nobody owns the directory and its files but may not write the directory
            subprocess.run(["chown", "-R", "nobody:nogroup", str(home)], check=True)
            home.chmod(0o555)
            yield


@pytest.fixture
def lock(tmp_path):
    how = os.environ.get("HIVEBOARD_TEST_READ_ONLY")  # "chattr" or "nobody": try another way where both work
    if os.geteuid() != 0:
        yield Lock("chmod", tmp_path)
        return
    probe = tmp_path / "probe"
    probe.mkdir()
    if how in (None, "chattr") and shutil.which("chattr"):
        if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0:
            subprocess.run(["chattr", "-i", str(probe)], check=True)
            yield Lock("chattr", tmp_path)
            return
    importable = [*NOBODY, sys.executable, "-c", "import hiveboard.server.cli"]
    if shutil.which("setpriv") and subprocess.run(importable, capture_output=True, cwd="/").returncode == 0:
        base = Path(tempfile.mkdtemp(prefix="hiveboard-read-only-"))
        base.chmod(0o755)  # the user nobody reaches the data directories inside
        try:
            yield Lock("nobody", base)
        finally:
            shutil.rmtree(base)
        return
    pytest.skip(
        "running as root, which ignores file permissions, and neither chattr +i (this file system) nor running "
        "hiveboard as the user nobody (setpriv) works here"
    )


READ_ONLY = (
    "the data directory {home} is read-only for this user, and this command writes to the board; make it "
    "writable, or point --home or HIVEBOARD_HOME at another directory"
)


@pytest.mark.parametrize(
    "command",
    [
        ["agent", "add", "bob"],
        ["agent", "token", "alice"],
        ["memory", "import", "{items}"],
        ["serve"],
        ["serve", "--http", "--port", "0"],
        ["web", "--no-browser", "--port", "0"],
        ["reindex"],
    ],
)
def test_commands_that_write_refuse_a_read_only_data_directory(lock, command):
    home = lock.base / "home"
    a_board(home)
    items = lock.base / "items.jsonl"
    items.write_text('{"text": "a note"}\n')
    items.chmod(0o644)
    with lock.read_only(home):
        before = listing(home)
        out = lock.cli("--home", str(home), *[arg.format(items=items) for arg in command])
        after = listing(home)
    refused(out, READ_ONLY.format(home=home))
    assert after == before


def test_commands_that_only_read_work_on_a_read_only_data_directory(lock):
    home = lock.base / "home"
    a_board(home)
    with lock.read_only(home):
        before = listing(home)
        board = lock.cli("--home", str(home), "board")
        agents = lock.cli("--home", str(home), "agent", "list")
        exported = lock.cli("--home", str(home), "memory", "export")
        after = listing(home)
    assert board.returncode == 0 and "#1" in board.stdout and "Design schema" in board.stdout, board.stderr
    assert agents.returncode == 0 and "alice\tcoder" in agents.stdout, agents.stderr
    assert exported.returncode == 0 and "retry flaky tests once" in exported.stdout, exported.stderr
    assert after == before  # not even a -wal or -shm file


def test_a_read_only_directory_without_a_board_is_refused(lock):
    home = lock.base / "empty"
    home.mkdir()
    with lock.read_only(home):
        before = listing(home)
        out = lock.cli("--home", str(home), "board")
        assert listing(home) == before
    refused(
        out,
        f"there is no board at {home / 'hiveboard.db'}, and none can be made because {home} is read-only for "
        f"this user; point --home or HIVEBOARD_HOME at an existing board, or make {home} writable",
    )


def test_doctor_names_a_read_only_data_directory(lock):
    home = lock.base / "home"
    a_board(home)
    with lock.read_only(home):
        before = listing(home)
        out = lock.cli("--home", str(home), "doctor", HIVEBOARD_REVIEW__EXECUTE="off")
        assert listing(home) == before
    assert out.returncode == 1, out.stderr
    assert (
        f"FAIL  data directory: the data directory {home} is read-only for this user, and only the commands that "
        "read (board, agent list, memory export) work there; make it writable" in out.stdout
    )
    assert f"ok    database: {home / 'hiveboard.db'} (readable and intact)" in out.stdout


# ---------------------------------------------------------------- a damaged database


def not_a_database(db: Path) -> str:
    db.write_bytes(b"these are not the pages of a SQLite database " * 200)
    return "file is not a database"


def truncated(db: Path) -> str:
    db.parent.mkdir(parents=True, exist_ok=True)
    a_board(db.parent)
    os.truncate(db, db.stat().st_size // 2)
    return "database disk image is malformed"


@pytest.mark.parametrize("damage", [not_a_database, truncated])
@pytest.mark.parametrize(
    "command", [["board"], ["agent", "list"], ["agent", "add", "bob"], ["memory", "export"], ["serve"]]
)
def test_a_damaged_database_is_refused(tmp_path, damage, command):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "hiveboard.db"
    reason = damage(db)
    before = listing(home)
    out = cli("--home", str(home), *command)
    refused(
        out,
        f"the database {db} is damaged ({reason}); restore it from a backup, or move it away so that a new, empty "
        "board is made there",
    )
    assert listing(home) == before


def test_doctor_finds_damage_deep_in_the_database(tmp_path):
    home = tmp_path / "home"
    db = a_board(home)
    store = Store(db)
    page_size = store.db.execute("PRAGMA page_size").fetchone()[0]
    root = store.db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tasks_recent'").fetchone()[0]
    store.close()
    with open(db, "r+b") as f:  # scribble over an index page: opening the file does not read it
        f.seek((root - 1) * page_size + 8)
        f.write(b"\xff" * 64)
    before = listing(home)
    out = cli("--home", str(home), "doctor", env={"HIVEBOARD_REVIEW__EXECUTE": "off"})
    assert out.returncode == 1
    assert re.search(rf"FAIL  database: the database {re.escape(str(db))} is damaged \(.*page", out.stdout), out.stdout
    assert listing(home) == before


# ---------------------------------------------------------------- config.toml


def with_config(tmp_path: Path, text: str) -> tuple[Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.toml"
    config.write_text(text)
    return home, config


def test_a_config_file_that_is_not_toml_is_refused_with_its_line_and_column(tmp_path):
    home, config = with_config(tmp_path, "[review]\nmax_rounds = \n")
    before = listing(home)
    refused(
        cli("--home", str(home), "board"),
        f"{config} is not valid TOML at line 2, column 14 (invalid value); fix it there, or set HIVEBOARD_CONFIG "
        "to another file",
    )
    assert listing(home) == before  # no database made


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[reveiw]\nmax_rounds = 3\n", "has an unknown table [reveiw] (did you mean [review]?)"),
        ("[review]\nmax_round = 3\n", "has an unknown setting review.max_round (did you mean review.max_rounds?)"),
        ("prot = 9000\n", "has an unknown setting prot (did you mean port?)"),
        (
            '[review.critics.sec]\nlense = "security"\nbackend = "bandit"\n',
            "has an unknown setting review.critics.sec.lense (did you mean review.critics.sec.lens?)",
        ),
    ],
)
def test_a_misspelt_table_or_key_is_refused_with_the_nearest_one(tmp_path, text, problem):
    home, config = with_config(tmp_path, text)
    refused(cli("--home", str(home), "board"), f"{config} {problem}; correct or remove it")
    assert not (home / "hiveboard.db").exists()


def test_a_value_of_the_wrong_type_names_the_key_and_the_type_it_wants(tmp_path):
    home, config = with_config(tmp_path, '[review]\nmax_rounds = "three"\n')
    refused(
        cli("--home", str(home), "board"),
        f"review.max_rounds in {config} should be a whole number, not 'three'; correct it",
    )


@pytest.fixture
def environ(monkeypatch):
    """This process's environment without HIVEBOARD_* settings; set more with monkeypatch.setenv."""
    for name in list(os.environ):
        if name.startswith("HIVEBOARD_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_environment_variables_still_set_what_the_file_leaves_and_name_themselves_when_wrong(tmp_path, environ):
    _, config = with_config(tmp_path, "[review]\nmax_rounds = 4\n\n[review.limits]\ncpu_seconds = 30\n")
    environ.setenv("HIVEBOARD_CONFIG", str(config))
    environ.setenv("HIVEBOARD_REVIEW__EXECUTE", "off")
    environ.setenv("HIVEBOARD_REVIEW__LIMITS__MEMORY_MB", "1024")
    settings = load_settings()
    assert settings.review.max_rounds == 4 and settings.review.execute == "off"
    assert settings.review.limits.cpu_seconds == 30 and settings.review.limits.memory_mb == 1024
    environ.setenv("HIVEBOARD_REVIEW__MAX_ROUNDS", "many")
    with pytest.raises(SetupError, match=r"^HIVEBOARD_REVIEW__MAX_ROUNDS should be a whole number, not 'many'"):
        load_settings()
    environ.delenv("HIVEBOARD_REVIEW__MAX_ROUNDS")
    with pytest.raises(SetupError, match=r"^--lease-seconds should be greater than or equal to 5, not 1; correct it$"):
        load_settings(lease_seconds=1)


def test_every_toml_example_in_the_reference_is_accepted(tmp_path, environ):
    blocks = re.findall(r"```toml\n(.*?)```", REFERENCE.read_text(), re.DOTALL)
    assert blocks, "docs/reference.md shows config.toml examples"
    config = tmp_path / "config.toml"
    environ.setenv("HIVEBOARD_CONFIG", str(config))
    for block in blocks:
        config.write_text(block)
        load_settings()  # raises SetupError naming the example's mistake


# ---------------------------------------------------------------- hiveboard doctor


def test_doctor_checks_a_healthy_set_up_and_changes_nothing(tmp_path):
    home, config = with_config(tmp_path, "[review]\nmax_rounds = 2\n")
    db = a_board(home)
    before = listing(home)
    out = cli("--home", str(home), "doctor", env={"HIVEBOARD_REVIEW__EXECUTE": "off"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ok    data directory: {home} (writable)" in out.stdout
    assert f"ok    database: {db} (readable and intact)" in out.stdout
    assert f"ok    config: {config} (found and valid)" in out.stdout
    assert listing(home) == before


def test_doctor_on_a_new_machine_makes_nothing(tmp_path):
    home = tmp_path / "new"
    out = cli("--home", str(home), "doctor", env={"HIVEBOARD_REVIEW__EXECUTE": "off"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ok    data directory: {home} (not there yet: the first command that writes makes it)" in out.stdout
    assert not home.exists()


def test_doctor_reports_a_config_file_that_does_not_parse_and_still_checks_the_data(tmp_path):
    home, config = with_config(tmp_path, "[review\n")
    a_board(home)
    out = cli("--home", str(home), "doctor")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[1].startswith("ok    data directory:") and lines[2].startswith("ok    database:")
    assert lines[3].startswith(f"FAIL  config: {config} is not valid TOML at line 1, column 8")


# ---------------------------------------------------------------- the command line


def test_the_global_options_also_come_after_the_command(tmp_path):
    a_board(tmp_path / "home")
    out = cli("board", "--home", str(tmp_path / "home"))
    assert out.returncode == 0 and "Design schema" in out.stdout, out.stderr
    # after the command wins over before it, as the later of two flags does
    out = cli("--home", str(tmp_path / "elsewhere"), "agent", "list", "--home", str(tmp_path / "home"))
    assert out.returncode == 0 and "alice\tcoder" in out.stdout, out.stderr
    assert not (tmp_path / "elsewhere").exists()
    out = cli("agent", "list", "--db", str(tmp_path / "home" / "hiveboard.db"), "--home", str(tmp_path / "other"))
    assert out.returncode == 0 and "alice\tcoder" in out.stdout, out.stderr


def test_agent_add_refuses_a_role_the_board_does_not_know(tmp_path):
    home = tmp_path / "home"
    refused(
        cli("--home", str(home), "agent", "add", "bob", "--role", "leed"),
        "unknown role 'leed' (did you mean lead?); the roles are human, lead and critic, which carry rights on the "
        "board, and coder, reviewer and tester, which are labels: pass one of them, or leave --role out",
    )
    assert not home.exists()
    assert cli("--home", str(home), "agent", "add", "bob", "--role", "lead").returncode == 0


def test_serve_refuses_a_role_the_board_does_not_know(tmp_path):
    home = tmp_path / "home"
    for env, argv in (({}, ["--role", "humna"]), ({"HIVEBOARD_AGENT_ROLE": "humna"}, [])):
        refused(
            cli("--home", str(home), "serve", "--agent", "bob", *argv, env=env),
            "unknown role 'humna' (did you mean human?); the roles are human, lead and critic, which carry rights on "
            "the board, and coder, reviewer and tester, which are labels: pass one of them, or leave --role out",
        )
    assert not home.exists()


def test_agent_list_has_a_header(tmp_path):
    a_board(tmp_path)
    out = cli("--home", str(tmp_path), "agent", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "name\trole\tcreated_at" and lines[1].startswith("alice\tcoder\t")


def test_progress_in_a_log_is_one_line_at_the_end(tmp_path):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(f'{{"text": "note {n}"}}\n' for n in range(1200)))  # three chunks
    out = cli("--home", str(tmp_path / "home"), "memory", "import", str(items))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert [line for line in lines if line.startswith("checking [")] == [
        f"checking [{'#' * 30}] {items.stat().st_size}/{items.stat().st_size} bytes (100%)"
    ]
    assert [line for line in lines if line.startswith("importing [")] == [
        f"importing [{'#' * 30}] 1200/1200 items (100%)"
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_in_place_on_a_terminal_and_ends_early_work_with_one_line():
    screen = Terminal()
    bar = Progress("importing", 4, stream=screen)
    for _ in range(4):
        bar.advance()
    assert screen.getvalue().count("\r") == 5 and screen.getvalue().endswith("4/4 items (100%)\n")
    log = io.StringIO()
    bar = Progress("indexing", 10, stream=log)
    bar.advance(3)  # another process indexed the rest
    bar.finish()
    bar.finish()
    assert log.getvalue() == f"indexing [{'#' * 9:<30}] 3/10 items (30%)\n"


def test_web_on_a_taken_port_says_so_before_naming_a_url_or_opening_a_browser(tmp_path):
    opened = tmp_path / "browser-opened"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\ntouch {opened}\n")
    browser.chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = cli("--home", str(tmp_path / "home"), "web", "--port", str(port), env={"BROWSER": str(browser)})
    refused(out, f"cannot serve on 127.0.0.1:{port}: Address already in use; stop the other server or pass --port")
    assert not opened.exists()


def test_a_misspelt_environment_variable_is_warned_about_with_the_nearest_one(tmp_path, environ, capsys):
    from hiveboard.server.cli import main

    environ.setenv("HIVEBOARD_LEASE_SECNDS", "60")
    environ.setenv("HIVEBOARD_REVIEW__MAX_ROUND", "3")
    environ.setenv("HIVEBOARD_REVIEW__EXECUTE", "off")
    assert main(["--home", str(tmp_path), "agent", "list"]) == 0
    assert capsys.readouterr().err.splitlines()[:2] == [
        "hiveboard: warning: HIVEBOARD_LEASE_SECNDS is not a hiveboard variable and is ignored "
        "(did you mean HIVEBOARD_LEASE_SECONDS?)",
        "hiveboard: warning: HIVEBOARD_REVIEW__MAX_ROUND is not a hiveboard variable and is ignored "
        "(did you mean HIVEBOARD_REVIEW__MAX_ROUNDS?)",
    ]


def test_every_variable_the_product_and_its_documents_name_is_known():
    from hiveboard.server.config import unknown_variables

    root = Path(__file__).resolve().parents[2]
    texts = [path.read_text() for path in [root / "README.md", *root.glob("docs/*.md")]]
    texts += [
        path.read_text()
        for folder in ("board", "memory", "critics", "server")
        for path in root.glob(f"{folder}/**/*.py")
    ]
    named = {name for text in texts for name in re.findall(r"\bHIVEBOARD_[A-Z0-9_]*[A-Z0-9]\b", text)}
    assert len(named) > 20 and unknown_variables(dict.fromkeys(named, "")) == []


@pytest.mark.parametrize("command", [["serve", "--http"], ["reindex"]])
def test_an_unreachable_database_is_named_before_the_missing_chroma_server(tmp_path, environ, capsys, command):
    from hiveboard.server.cli import main

    url = "postgresql://nobody@127.0.0.1:1/board"
    assert main(["--home", str(tmp_path / "home"), "--db", url, *command]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hiveboard: the database {url} cannot be used (") and "Chroma" not in err, err
