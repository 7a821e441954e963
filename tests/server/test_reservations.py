"""Path reservations through MCP, on SQLite and PostgreSQL: agents racing for overlapping paths, the lifetime of a
reservation (release, its card's end, its card's lease), what get_task, get_board and claim_task show, refusals of
bad input, and the git guard in a real repository."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest
from conftest import call, call_error, clean_env, run_cli
from mcp import Client

from hiveboard.board.db import Store
from hiveboard.board.reservations import overlap
from hiveboard.board.tasks import Board
from hiveboard.server.app import build_server
from hiveboard.server.cli import board_text
from hiveboard.server.guard import CHAINED, MARK
from hiveboard.server.identity import Identity
from hiveboard.server.web.app import card_page
from hiveboard.server.web.pages import Viewer

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

# sixteen patterns, each of which matches src/app.py: every two of them overlap
CONTESTED = [
    "src/**",
    "src/app.py",
    "src/*.py",
    "src/[a-z]pp.py",
    "**/app.py",
    "src/a*",
    "**/a*",  # not "**": a pattern that covers the whole repository is an operator's (test_caps.py)
    "src/ap?.py",
    "*/app.py",
    "src/*",
    "**/*.py",
    "src/app.*",
    "[s]rc/app.py",
    "src/**/app.py",
    "s*/a*.py",
    "src",
]


def live_rows(board: Board) -> list[dict]:
    """The reservations the database holds as live, read with the board's own rule."""
    from hiveboard.board.reservations import LIVE

    now = time.time()
    cursor = board.store.db.execute(f"SELECT r.* FROM reservations r WHERE {LIVE} ORDER BY r.id", [now, now])
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, r)) for r in cursor.fetchall()]


def assert_no_two_holders(board: Board) -> None:
    for a, b in itertools.combinations(live_rows(board), 2):
        if a["agent"] != b["agent"] and a["scope"] == b["scope"] and (a["exclusive"] or b["exclusive"]):
            assert not overlap(a["pattern"], b["pattern"]), f"two live holders of overlapping paths: {a} {b}"


def client(board: Board, agent: str) -> Client:
    return Client(build_server(board, Identity(board.agents, "memory", agent=agent)))


def race(store_target: str, names: list[str], patterns: dict[str, str]) -> dict[str, str | None]:
    """Each agent on a node of its own (its own store, event loop and thread, as separate server processes are)
    calls reserve_paths through MCP at the same moment: its own file and its contested pattern. What each was
    answered: None for a reservation, else the refusal."""
    ready = threading.Barrier(len(names))
    outcome: dict[str, str | None] = {}

    async def agent(board: Board, name: str) -> None:
        async with client(board, name) as c:
            await call(c, "whoami")
            await anyio.to_thread.run_sync(ready.wait)
            result = await c.call_tool(
                "reserve_paths", {"paths": [f"own/{name}.txt", patterns[name]], "reason": f"{name} edits"}
            )
            outcome[name] = result.content[0].text if result.is_error else None

    def node(name: str) -> None:
        board = Board(Store(store_target))
        try:
            anyio.run(agent, board, name)
        finally:
            board.store.close()

    threads = [threading.Thread(target=node, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcome) == sorted(names)
    return outcome


@pytest.mark.slow
async def test_sixteen_agents_racing_for_overlapping_paths_get_one_holder_at_a_time(store_target, board):
    assert all(overlap(a, b) for a, b in itertools.combinations(_canonical(CONTESTED), 2))
    agents = [f"agent-{i:02d}" for i in range(16)]
    patterns = dict(zip(agents, CONTESTED))
    contenders = list(agents)
    winners: list[str] = []
    for _round in range(3):
        outcome = await anyio.to_thread.run_sync(race, store_target, contenders, patterns)
        won = [name for name, refusal in outcome.items() if refusal is None]
        assert len(won) == 1, outcome
        winner = won[0]
        for name, refusal in outcome.items():
            if name != winner:
                assert f"held exclusively by {winner}" in refusal and "nothing was reserved" in refusal
        assert {(r["agent"], r["pattern"]) for r in live_rows(board)} == {
            (winner, f"own/{winner}.txt"),
            (winner, _canonical([patterns[winner]])[0]),
        }  # the refused calls wrote nothing, their own file included
        assert_no_two_holders(board)
        winners.append(winner)
        # its release makes the paths available at once: the others race again
        async with client(board, winner) as c:
            await call(c, "release_paths", paths=[f"own/{winner}.txt", patterns[winner]])
        assert live_rows(board) == []
        contenders.remove(winner)
    assert len(set(winners)) == 3


def _canonical(patterns: list[str]) -> list[str]:
    from hiveboard.board.reservations import normalize

    return [normalize(p) for p in patterns]


async def test_shared_reservations_coexist_and_an_exclusive_one_meets_them_refused(connect, board):
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        await call(alice, "reserve_paths", paths=["docs/**"], exclusive=False)
        await call(bob, "reserve_paths", paths=["docs/guide.md"], exclusive=False, reason="typos")
        refusal = await call_error(carol, "reserve_paths", paths=["docs/guide.md"])
        assert "held shared by" in refusal and "reserve it shared (exclusive=false)" in refusal
        await call(carol, "reserve_paths", paths=["src/**"])
        refusal = await call_error(alice, "reserve_paths", paths=["src/app.py"], exclusive=False)
        assert "held exclusively by carol" in refusal
    assert {(r["agent"], r["pattern"], r["exclusive"]) for r in live_rows(board)} == {
        ("alice", "docs/**", 0),
        ("bob", "docs/guide.md", 0),
        ("carol", "src/**", 1),
    }
    assert_no_two_holders(board)


async def test_a_reservation_ends_with_its_cards_end(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        task = await call(alice, "create_task", title="api", paths=["src/api/"])
        token = (await call(alice, "claim_task", task_id=task["id"]))["token"]
        reserved = await call(alice, "reserve_paths", paths=["src/api/"])
        assert reserved["reservations"][0]["task_id"] == task["id"] and "released when it ends" in reserved["message"]
        assert "held exclusively by alice" in await call_error(bob, "reserve_paths", paths=["src/api/x.py"])
        await call(alice, "complete_task", task_id=task["id"], token=token, output="done")  # no review: done
        await call(bob, "reserve_paths", paths=["src/api/x.py"])
        card = await call(alice, "get_task", task_id=task["id"])
        assert [r["agent"] for r in card["reservations"]] == ["bob"]  # alice's went with her card
    ended = board.store.db.execute("SELECT released_at FROM reservations WHERE agent = 'alice'").fetchall()
    assert len(ended) == 1 and ended[0][0] is not None  # released as the card moved, not only ignored


async def test_a_reservation_ends_with_its_cards_lease(store_target):
    board = Board(Store(store_target), lease_seconds=1)
    try:
        async with client(board, "alice") as alice, client(board, "bob") as bob:
            task = await call(alice, "create_task", title="api")
            await call(alice, "claim_task", task_id=task["id"])
            await call(alice, "reserve_paths", paths=["src/**"])
            # the lease runs out, and a read of the board sweeps it: the card and its reservation with it
            while (await call(bob, "get_board", top=0)).get("reservations"):
                await anyio.sleep(0.05)
            assert (await call(bob, "get_task", task_id=task["id"]))["status"] == "todo"
            released = board.store.db.execute("SELECT released_at FROM reservations").fetchall()
            assert len(released) == 1 and released[0][0] is not None
            await call(bob, "reserve_paths", paths=["src/app.py"])
    finally:
        board.store.close()


async def test_the_board_the_card_and_the_claim_show_reservations(connect, board):
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        task = await call(carol, "create_task", title="api", paths=["./src/api", "docs/api.md"])
        await call(bob, "reserve_paths", paths=["src/api/auth.py"], reason="auth", exclusive=False)
        await call(bob, "reserve_paths", paths=["lib/**"])
        card = await call(alice, "get_task", task_id=task["id"])
        assert card["paths"] == ["src/api/**", "docs/api.md"]
        assert [(r["agent"], r["pattern"], r["reason"]) for r in card["reservations"]] == [
            ("bob", "src/api/auth.py", "auth")
        ]
        claim = await call(alice, "claim_task", task_id=task["id"])
        assert claim["claimed"] and "reserved by bob" in claim["message"]
        assert [r["pattern"] for r in claim["reservations"]] == ["src/api/auth.py"]
        view = await call(alice, "get_board", top=0)
        assert view["reservations_live"] == 2 and {r["pattern"] for r in view["reservations"]} == {
            "src/api/auth.py",
            "lib/**",
        }
        assert "reservations" not in await call(carol, "claim_task")  # no card: nothing to warn about
    # and the card's web page shows who holds what, as does the terminal's board
    page = await anyio.to_thread.run_sync(card_page, board, task["id"], Viewer("carol", "csrf", False))
    assert 'id="reservations"' in page and "<code>src/api/auth.py</code>" in page and "@bob" in page
    text = await anyio.to_thread.run_sync(board_text, board, 0)
    lines = text.split("RESERVED PATHS (2)\n")[1].splitlines()
    assert lines[0].startswith("  src/api/auth.py  @bob, shared, until ")
    assert lines[1].startswith("  lib/**  @bob, exclusive, until ")


async def test_each_bad_input_is_refused_in_one_sentence_and_nothing_is_written(connect, board):
    async with connect("alice") as alice, connect("bob") as bob:
        await call(alice, "reserve_paths", paths=["keep.txt"])
        before = board.store.db.execute("SELECT * FROM reservations").fetchall()
        cases = [
            ("reserve_paths", dict(paths=[]), "at least 1 item"),
            ("reserve_paths", dict(paths=[f"f{i}" for i in range(51)]), "at most 50"),
            ("reserve_paths", dict(paths=["x" * 301]), "at most 300 characters"),
            ("reserve_paths", dict(paths=["ok.txt", "a\x00b"]), "NUL character"),
            ("reserve_paths", dict(paths=["ok.txt", "/etc/passwd"]), "is absolute"),
            ("reserve_paths", dict(paths=["ok.txt", "src/../../etc"]), "'..' segment"),
            ("reserve_paths", dict(paths=["ok.txt", "src/[ab"]), "never closed"),
            ("reserve_paths", dict(paths=["ok.txt", "a\nb"]), "control character"),
            ("reserve_paths", dict(paths=["ok.txt"], ttl_seconds=0), "greater than or equal to 1"),
            ("reserve_paths", dict(paths=["ok.txt"], ttl_seconds=10**9), "less than or equal to 604800"),
            ("reserve_paths", dict(paths=["ok.txt"], reason="r" * 501), "at most 500 characters"),
            ("reserve_paths", dict(paths=["ok.txt"], task_id=0), "greater than or equal to 1"),
            ("reserve_paths", dict(paths=["ok.txt"], task_id=77), "task 77 does not exist"),
            ("reserve_paths", dict(path=["ok.txt"]), "did you mean 'paths'"),
            ("reserve_paths", dict(paths=["keep.txt"]), "held exclusively by alice"),
            ("release_paths", dict(paths=["keep.txt"]), "you hold no reservation of 'keep.txt'; you hold nothing"),
            ("release_paths", dict(paths=["../x"]), "'..' segment"),
            ("create_task", dict(title="t", paths=["ok/", "C:/windows"]), "is absolute"),
            ("create_task", dict(title="t", paths=["x"] * 51), "at most 50"),
        ]
        for tool, args, says in cases:
            refusal = await call_error(bob, tool, **args)
            assert says in refusal and "\n" not in refusal, (tool, args, refusal)
        assert board.store.db.execute("SELECT * FROM reservations").fetchall() == before
        assert board.store.db.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


# ----------------------------------------------------------------------------- the git guard


def git(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        timeout=300,
    )


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    assert git(path, "init", "-q", "-b", "main").returncode == 0
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    assert git(path, "commit", "-q", "-m", "first").returncode == 0
    return path


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def change(repo: Path, name: str) -> None:
    file = repo / name
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(file.read_text() + "more\n" if file.exists() else "new\n")
    assert git(repo, "add", name).returncode == 0


def board_env(tmp_path: Path, store_target: str, password: str | None = None) -> dict[str, str]:
    """Where the guard's install finds the board the server uses (a PostgreSQL URL given with a password)."""
    if "://" not in store_target:
        return clean_env(HIVEBOARD_HOME=str(Path(store_target).parent))
    url = store_target.replace("postgres@", f"postgres:{password}@") if password else store_target
    return clean_env(HIVEBOARD_HOME=str(tmp_path / "home"), HIVEBOARD_DB=url)


@pytest.mark.slow
async def test_the_guard_refuses_a_commit_in_a_reserved_path(tmp_path, connect, store_target):
    repo = new_repo(tmp_path / "repo")
    installed = run_cli("guard", "install", str(repo), env=board_env(tmp_path, store_target, "s3cret"))
    assert installed.returncode == 0, installed.stderr
    hook = (repo / ".git" / "hooks" / "pre-commit").read_text()
    assert MARK in hook and "s3cret" not in hook  # never a database password in the hook file

    async with connect("alice") as alice, connect("bob") as bob:
        task = await call(alice, "create_task", title="app", paths=["src/"])
        token = (await call(alice, "claim_task", task_id=task["id"]))["token"]
        await call(alice, "reserve_paths", paths=["src/"], reason="rewriting the app")
        await call(bob, "reserve_paths", paths=["docs/**"], exclusive=False)
        until = (await call(alice, "get_task", task_id=task["id"]))["reservations"][0]["until"]

        # nobody named (no HIVEBOARD_AGENT, branch main): alice's exclusive reservation blocks
        change(repo, "src/app.py")
        change(repo, "README.md")
        first = head(repo)
        refused = git(repo, "commit", "-q", "-m", "touch src")
        assert refused.returncode == 1 and head(repo) == first, refused.stderr
        for part in ("src/app.py", "alice", f"task {task['id']}", until, "rewriting the app", "commit refused"):
            assert part in refused.stderr, (part, refused.stderr)
        assert "README.md" not in refused.stderr
        as_bob = git(repo, "commit", "-q", "-m", "touch src", env=clean_env(HIVEBOARD_AGENT="bob"))
        assert as_bob.returncode == 1 and "you commit as bob" in as_bob.stderr

        warned = git(repo, "commit", "-q", "-m", "warned", env=clean_env(HIVEBOARD_GUARD="warn"))
        assert warned.returncode == 0 and "src/app.py is reserved exclusively by alice" in warned.stderr
        assert head(repo) != first

        change(repo, "src/app.py")
        assert git(repo, "commit", "-q", "-m", "off", env=clean_env(HIVEBOARD_GUARD="off")).returncode == 0
        change(repo, "src/app.py")
        assert git(repo, "commit", "-q", "--no-verify", "-m", "bypassed").returncode == 0

        # the holder commits: named, or on its worktree branch
        change(repo, "src/app.py")
        assert git(repo, "commit", "-q", "-m", "holder", env=clean_env(HIVEBOARD_AGENT="alice")).returncode == 0
        assert git(repo, "checkout", "-q", "-b", f"hb/alice/{task['id']}").returncode == 0
        change(repo, "src/app.py")
        on_branch = git(repo, "commit", "-q", "-m", "on alice's branch")
        assert on_branch.returncode == 0, on_branch.stderr
        assert git(repo, "checkout", "-q", "-b", "hb/bob/1").returncode == 0
        change(repo, "src/app.py")
        assert git(repo, "commit", "-q", "-m", "on bob's branch").returncode == 1

        # a rename out of the reserved directory touches it too; a shared reservation is only mentioned
        git(repo, "reset", "-q", "--hard")
        assert git(repo, "checkout", "-q", "main").returncode == 0
        assert git(repo, "mv", "src/app.py", "app.py").returncode == 0
        assert git(repo, "commit", "-q", "-m", "moved").returncode == 1
        git(repo, "reset", "-q", "--hard")
        change(repo, "docs/guide.md")
        shared = git(repo, "commit", "-q", "-m", "docs")
        assert shared.returncode == 0 and "docs/guide.md is reserved (shared) by bob" in shared.stderr

        # once alice's card ends, so does her reservation
        await call(alice, "release_task", task_id=task["id"], token=token)
        change(repo, "src/app.py")
        assert git(repo, "commit", "-q", "-m", "free again").returncode == 0


async def test_the_guard_lets_a_commit_through_when_the_board_cannot_be_read(tmp_path, store_target):
    repo = new_repo(tmp_path / "repo")
    assert run_cli("guard", "install", str(repo), env=board_env(tmp_path, store_target)).returncode == 0
    change(repo, "src/app.py")
    missing = tmp_path / "elsewhere" / "none.db"
    done = git(repo, "commit", "-q", "-m", "unchecked", env=clean_env(HIVEBOARD_DB=str(missing)))
    assert done.returncode == 0 and "cannot read the board" in done.stderr and "not checked" in done.stderr
    assert not missing.exists()  # the guard made no board


@pytest.mark.backends("sqlite")
async def test_the_guard_chains_an_existing_hook_and_respects_core_hookspath(tmp_path, board):
    env = clean_env(HIVEBOARD_HOME=str(tmp_path))
    repo = new_repo(tmp_path / "repo")
    hooks = repo / ".git" / "hooks"
    theirs = '#!/bin/sh\necho theirs >> "$(git rev-parse --git-dir)/ran"\n[ ! -e STOP ]\n'
    (hooks / "pre-commit").write_text(theirs)
    (hooks / "pre-commit").chmod(0o755)
    installed = run_cli("guard", "install", str(repo), env=env)
    assert installed.returncode == 0 and CHAINED in installed.stderr, installed.stderr
    assert (hooks / CHAINED).read_text() == theirs and MARK in (hooks / "pre-commit").read_text()
    assert run_cli("guard", "install", str(repo), env=env).returncode == 0  # again: updated, theirs kept
    assert (hooks / CHAINED).read_text() == theirs

    change(repo, "a.txt")
    assert git(repo, "commit", "-q", "-m", "both run").returncode == 0
    assert (repo / ".git" / "ran").read_text() == "theirs\n"
    (repo / "STOP").write_text("")
    change(repo, "a.txt")
    assert git(repo, "commit", "-q", "-m", "theirs fails").returncode != 0  # their refusal still refuses
    (repo / "STOP").unlink()

    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")  # a third hook where ours was
    refused = run_cli("guard", "install", str(repo), env=env)
    assert refused.returncode == 2 and "merge the two by hand" in refused.stderr
    assert (hooks / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n" and (hooks / CHAINED).read_text() == theirs
    (hooks / "pre-commit").unlink()
    assert run_cli("guard", "install", str(repo), env=env).returncode == 0
    removed = run_cli("guard", "uninstall", str(repo), env=env)
    assert removed.returncode == 0 and (hooks / "pre-commit").read_text() == theirs and not (hooks / CHAINED).exists()

    git(repo, "config", "core.hooksPath", ".githooks")
    assert run_cli("guard", "install", str(repo), env=env).returncode == 0
    assert MARK in (repo / ".githooks" / "pre-commit").read_text()
    board.reservations.reserve("alice", ["b.txt"])
    change(repo, "b.txt")
    assert git(repo, "commit", "-q", "-m", "reserved").returncode == 1

    not_a_repo = run_cli("guard", "install", str(tmp_path / "plain"), env=env)
    assert not_a_repo.returncode == 2 and not_a_repo.stderr.count("\n") == 1
    (tmp_path / "plain").mkdir()
    not_a_repo = run_cli("guard", "install", str(tmp_path / "plain"), env=env)
    assert not_a_repo.returncode == 2 and "is not inside a git repository" in not_a_repo.stderr
