"""Registered repositories and a git worktree per claimed card (server/worktrees.py, server/repo_cli.py): real
repositories made here, git in the real sandbox, through a real MCP client, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from conftest import call, call_error, clean_env, data, run_cli, stdio_server, until
from mcp import Client

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.review_models import Synthesis
from hiveboard.board.tasks import Board
from hiveboard.critics.git import Git, GitError
from hiveboard.server.app import build_server
from hiveboard.server.identity import Identity
from hiveboard.server.worktrees import WorktreeManager, WorktreeSweeper

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]

GIT = Git.for_machine()
if GIT.why_not() and not GIT.unsafe:
    pytestmark.append(pytest.mark.skip(reason=f"git cannot run here as hiveboard runs it: {GIT.why_not()}"))


def git(repo: Path, *args: str) -> str:
    """The test's own git (its repositories are its own), outside any sandbox."""
    env = clean_env(
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


def make_repo(path: Path, branch: str = "main") -> Path:
    """A repository with one commit on `branch`, an ignored .env beside it and a .worktreeinclude listing it."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    (path / "app.py").write_text("print('hello')\n")
    (path / ".gitignore").write_text(".env\nconfig/*.local\nsecret-link\n")
    (path / ".worktreeinclude").write_text("# env files\n.env\nconfig/*.local\nsecret-link\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    (path / ".env").write_text("TOKEN=abc\n")
    (path / "config").mkdir()
    (path / "config" / "db.local").write_text("db=local\n")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "work" / "app")


@pytest.fixture
def manager(board: Board) -> WorktreeManager:
    return WorktreeManager(board, Git.for_machine([Path(board.store.path)] if "://" not in board.store.path else []))


@pytest.fixture
def registered(board: Board, manager: WorktreeManager, repo: Path) -> Path:
    top, git_dir = manager.inspect(repo, "main")
    board.repos.add("app", top, git_dir, "main", None, "auto", "operator")
    return repo


@pytest.fixture
def sweeper(manager: WorktreeManager):
    workers = []

    def start() -> WorktreeSweeper:
        workers.append(WorktreeSweeper(manager, poll_seconds=0.2).start())
        return workers[-1]

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def connect(board: Board, manager: WorktreeManager):
    """An MCP client acting as `agent`, on a server without review (a completed card goes to done)."""

    @asynccontextmanager
    async def _connect(agent: str, on: Board | None = None, wants_review=None):
        on = on or board
        worktrees = manager if on is board else WorktreeManager(on, manager.git)
        server = build_server(
            on, Identity(on.agents, "memory", agent=agent), worktrees=worktrees, wants_review=wants_review
        )
        async with Client(server) as client:
            yield client

    return _connect


def gone(repo: Path, worktree: Path) -> bool:
    """Whether git removed the worktree: its directory, then its record in the repository."""
    return not worktree.exists() and str(worktree) not in listed(repo)


def branch_of(worktree: str) -> str:
    return git(Path(worktree), "rev-parse", "--abbrev-ref", "HEAD")


def listed(repo: Path) -> list[str]:
    """The worktrees git knows of in `repo`."""
    out = git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


async def claim_in_repo(client: Client, title: str = "Fix it") -> tuple[int, dict]:
    card = await call(client, "create_task", title=title, repo="app")
    return card["id"], await call(client, "claim_task", task_id=card["id"], worktree=True)


# ----------------------------------------------------------------- claiming with a worktree


async def test_claim_with_worktree_gives_a_worktree_of_the_repo_on_its_own_branch_at_the_base(
    registered: Path, connect, tmp_path: Path
):
    outside = tmp_path / "outside-secret"
    outside.write_text("not the repo's\n")
    (registered / "secret-link").symlink_to(outside)
    base = git(registered, "rev-parse", "main")
    async with connect("alice") as alice:
        task_id, claim = await claim_in_repo(alice)
        assert claim["claimed"] and claim["branch"] == f"hb/alice/{task_id}"
        path = Path(claim["worktree"])
        assert path.is_dir() and path.is_relative_to(registered / ".hiveboard" / "worktrees")
        assert str(path) in listed(registered)
        assert branch_of(claim["worktree"]) == f"hb/alice/{task_id}"
        assert git(path, "rev-parse", "HEAD") == base
        assert (path / "app.py").read_text() == "print('hello')\n"
        # the env files .worktreeinclude lists are copied in; a symlink out of the repository is not followed
        assert sorted(claim["copied"]) == [".env", "config/db.local"]
        assert (path / ".env").read_text() == "TOKEN=abc\n"
        assert (path / "config" / "db.local").read_text() == "db=local\n"
        assert not (path / "secret-link").exists()
        assert "secret-link" in claim["message"] and ".env" in claim["message"]
        # the main worktree does not list the worktrees
        assert "/.hiveboard/" in (registered / ".git" / "info" / "exclude").read_text().splitlines()
        assert ".hiveboard" not in git(registered, "status", "--porcelain", "--untracked-files=all")
        card = await call(alice, "get_task", task_id=task_id)
        assert card["repo"] == "app"
        listed_cards = await call(alice, "list_tasks")
        assert listed_cards["tasks"][0]["repo"] == "app"


async def test_worktreeinclude_copies_regular_files_only_and_within_bounds(registered: Path, connect, tmp_path: Path):
    outside = tmp_path / "outside.env"
    outside.write_text("someone else's\n")
    os.link(outside, registered / "hard.env")
    os.mkfifo(registered / "a-pipe.env")  # git lists no FIFO; one that replaced a listed file is refused too
    many = registered / "many"
    many.mkdir()
    for n in range(105):
        (many / f"{n:03}.env").write_text(f"N={n}\n")
    (registered / ".worktreeinclude").write_text("*.env\n")
    async with connect("alice") as alice:
        _, claim = await claim_in_repo(alice)
    path = Path(claim["worktree"])
    assert len(claim["copied"]) == 100 and {".env", "many/000.env"} <= set(claim["copied"])
    assert (path / "many" / "000.env").read_text() == "N=0\n"
    assert not (path / "hard.env").exists() and not (path / "a-pipe.env").exists()
    assert "hard.env (a hard link)" in claim["message"]
    assert "6 more file(s): at most 100 are copied" in claim["message"]  # .env and 105 in many/: 6 too many


async def test_a_new_worktree_starts_where_the_merge_queue_left_the_base_not_at_a_commit_put_there_behind_it(
    registered: Path, connect
):
    base = git(registered, "rev-parse", "main")
    async with connect("alice") as alice:
        await claim_in_repo(alice)  # hiveboard records where it found the base
        (registered / "app.py").write_text("print('unreviewed')\n")
        git(registered, "commit", "-q", "-am", "straight onto main")
        moved = git(registered, "rev-parse", "main")
        _, claim = await claim_in_repo(alice)
    path = Path(claim["worktree"])
    assert git(path, "rev-parse", "HEAD") == base != moved
    assert (path / "app.py").read_text() == "print('hello')\n"
    assert f"main moved to {moved[:12]} outside it" in claim["message"]


async def test_claiming_again_gives_the_same_worktree_back(registered: Path, connect):
    async with connect("alice") as alice:
        task_id, first = await claim_in_repo(alice)
        again = await call(alice, "claim_task", task_id=task_id, worktree=True)
        assert again["worktree"] == first["worktree"] and again["branch"] == first["branch"]
        assert again["token"] == first["token"]
        # released and claimed again before anything removed it: the same worktree, work and all
        Path(first["worktree"], "notes.txt").write_text("half done\n")
        await call(alice, "release_task", task_id=task_id, token=first["token"])
        back = await call(alice, "claim_task", task_id=task_id, worktree=True)
        assert back["worktree"] == first["worktree"] and Path(back["worktree"], "notes.txt").exists()
    assert len(listed(registered)) == 2


async def test_claim_next_with_worktree_takes_only_cards_that_name_a_repository(registered: Path, connect):
    async with connect("alice") as alice:
        await call(alice, "create_task", title="No repo", priority="high")
        card = await call(alice, "create_task", title="In the repo", repo="app")
        claim = await call(alice, "claim_task", worktree=True)
        assert claim["task"]["id"] == card["id"] and Path(claim["worktree"]).is_dir()
        nothing = await call(alice, "claim_task", worktree=True)
        assert not nothing["claimed"] and "naming a repository" in nothing["message"]


async def test_agents_claiming_at_once_each_get_their_own_worktree(registered: Path, connect, board: Board):
    agents = [f"agent-{n}" for n in range(6)]
    async with connect("lead") as lead:
        ids = [(await call(lead, "create_task", title=f"Card {n}", repo="app"))["id"] for n in range(6)]
    claims: dict[str, dict] = {}

    async def claim(agent: str, task_id: int) -> None:
        async with connect(agent) as client:
            claims[agent] = await call(client, "claim_task", task_id=task_id, worktree=True)

    async with anyio.create_task_group() as group:
        for agent, task_id in zip(agents, ids):
            group.start_soon(claim, agent, task_id)
    paths = {c["worktree"] for c in claims.values()}
    assert len(paths) == 6 and set(listed(registered)) == {str(registered), *paths}
    for agent, task_id in zip(agents, ids):
        assert branch_of(claims[agent]["worktree"]) == f"hb/{agent}/{task_id}"


async def test_worktrees_stop_at_the_agents_and_the_repositorys_cap_and_nothing_is_claimed(
    registered: Path, connect, board: Board, monkeypatch
):
    caps = {"worktrees_per_agent": 2, "worktrees_per_repository": 3}
    monkeypatch.setattr(board.quotas, "cap", lambda name: caps.get(name, 0))  # [quotas] as an operator sets them
    async with connect("mallory") as mallory, connect("bob") as bob:
        for n in range(2):
            assert (await claim_in_repo(mallory, f"Card {n}"))[1]["worktree"]
        card = await call(mallory, "create_task", title="One more", repo="app")
        error = await call_error(mallory, "claim_task", task_id=card["id"], worktree=True)
        assert error.endswith(
            f"task {card['id']}'s worktree could not be made: you have 2 live worktrees, the most one agent may "
            "(HIVEBOARD_QUOTAS__WORKTREES_PER_AGENT=2): finish or release a card you hold, or claim without "
            "worktree=true; nothing was claimed"
        )
        assert (await call(mallory, "get_task", task_id=card["id"]))["status"] == "todo"
        assert len(listed(registered)) == 3  # the main worktree and mallory's two
        assert (await claim_in_repo(bob, "Bob's card"))[1]["worktree"]
        error = await call_error(bob, "claim_task", task_id=card["id"], worktree=True)
        assert "repository 'app' has 3 live worktrees, the most it may" in error
        assert (await call(bob, "get_task", task_id=card["id"]))["status"] == "todo"


async def test_worktrees_stop_at_the_agents_and_the_repositorys_disk_and_nothing_is_claimed(
    registered: Path, connect, board: Board, monkeypatch
):
    # a checkout of 0.4 MB of tracked files: the caps count what git writes, measured before it writes anything
    (registered / "data.bin").write_bytes(os.urandom(400_000))
    git(registered, "add", "data.bin")
    git(registered, "commit", "-q", "-m", "data")
    caps = {"worktree_mb_per_agent": 1.0, "worktree_mb_per_repository": 1.5}
    monkeypatch.setattr(board.quotas, "cap", lambda name: caps.get(name, 0))  # [quotas] as an operator sets them
    async with connect("mallory") as mallory, connect("bob") as bob:
        for n in range(2):
            assert (await claim_in_repo(mallory, f"Card {n}"))[1]["worktree"]
        card = await call(mallory, "create_task", title="One more", repo="app")
        error = await call_error(mallory, "claim_task", task_id=card["id"], worktree=True)
        assert error.endswith(
            f"task {card['id']}'s worktree could not be made: a worktree of 'app' takes 0.4 MB and your live worktrees "
            "0.8 MB, more than one agent may hold (HIVEBOARD_QUOTAS__WORKTREE_MB_PER_AGENT=1): finish or release a "
            "card you hold, or claim without worktree=true; nothing was claimed"
        )
        assert (await call(mallory, "get_task", task_id=card["id"]))["status"] == "todo"
        assert len(listed(registered)) == 3  # the main worktree and mallory's two: nothing was checked out
        assert (await claim_in_repo(bob, "Bob's card"))[1]["worktree"]  # 1.2 MB of the repository's 1.5
        error = await call_error(bob, "claim_task", task_id=card["id"], worktree=True)
        assert (
            "a worktree of 'app' takes 0.4 MB and its live worktrees 1.2 MB, more than one repository may hold" in error
        )
        assert "(HIVEBOARD_QUOTAS__WORKTREE_MB_PER_REPOSITORY=1.5)" in error
        assert (await call(bob, "get_task", task_id=card["id"]))["status"] == "todo"
        assert len(listed(registered)) == 4


async def test_agents_racing_for_one_card_leave_one_worktree(registered: Path, connect, board: Board):
    async with connect("lead") as lead:
        task_id = (await call(lead, "create_task", title="Wanted", repo="app"))["id"]
    won: list[dict] = []
    lost: list[str] = []

    async def claim(agent: str) -> None:
        async with connect(agent) as client:
            result = await client.call_tool("claim_task", {"task_id": task_id, "worktree": True})
            if result.is_error:
                lost.append(result.content[0].text)
            else:
                won.append(data(result))

    async with anyio.create_task_group() as group:
        for n in range(6):
            group.start_soon(claim, f"racer-{n}")
    assert len(won) == 1 and len(lost) == 5 and all("claimed by" in e or "is in_progress" in e for e in lost), lost
    assert listed(registered) == [str(registered), won[0]["worktree"]]


# ----------------------------------------------------------------- no orphans


async def test_review_a_fail_and_a_person_keep_the_worktree_until_the_card_leaves_its_agent(
    registered: Path, connect, manager: WorktreeManager, board: Board
):
    async with connect("alice", wants_review=lambda card: True) as alice:
        task_id, claim = await claim_in_repo(alice)
        path = Path(claim["worktree"])
        assert (await call(alice, "complete_task", task_id=task_id, token=claim["token"], output="x"))[
            "status"
        ] == "review"
        manager.sweep()
        assert path.is_dir()  # in review
        job = board.reviews.claim_job("test-worker", 60)
        board.reviews.finish(job, "test-worker", Synthesis(verdict="FAIL", brief="fix it"), "in_progress", "FAIL", [])
        assert board.get(task_id).status == "in_progress"
        manager.sweep()
        assert path.is_dir()  # sent back to alice by a FAIL
        again = await call(alice, "claim_task", task_id=task_id, worktree=True)
        assert again["worktree"] == claim["worktree"] and "from before" in again["message"]
        await call(alice, "update_task", task_id=task_id, token=claim["token"], status="needs_human", reason="stuck")
        manager.sweep()
        assert path.is_dir()  # waits on a person, still alice's
    board.agents.ensure("lee", "lead")
    async with connect("lee") as lee:
        await call(lee, "update_task", task_id=task_id, status="todo")
    lines, _ = manager.sweep()
    assert not path.exists() and lines == [
        f"task {task_id}: removed worktree {path} and branch {claim['branch']} (main has it)"
    ]


async def test_the_worktree_goes_when_the_card_is_done_and_its_unmerged_branch_stays(
    registered: Path, connect, sweeper, board: Board
):
    sweeper()
    async with connect("alice") as alice:
        task_id, claim = await claim_in_repo(alice)
        path = Path(claim["worktree"])
        (path / "app.py").write_text("print('fixed')\n")
        git(path, "commit", "-qam", "fix")
        done = await call(alice, "complete_task", task_id=task_id, token=claim["token"], output="fixed")
        assert done["status"] == "done"
    await until(lambda: gone(registered, path), what="the done card's worktree to be removed")
    assert str(path) not in listed(registered)
    assert git(registered, "branch", "--list", claim["branch"])  # not merged into main: kept
    assert board.worktrees.live(task_id, "alice") is None


async def test_the_worktree_goes_when_the_card_is_released_and_its_unused_branch_too(
    registered: Path, connect, sweeper
):
    sweeper()
    async with connect("alice") as alice:
        task_id, claim = await claim_in_repo(alice)
        path = Path(claim["worktree"])
        await call(alice, "release_task", task_id=task_id, token=claim["token"], reason="not mine")
        await until(lambda: gone(registered, path), what="the released card's worktree to be removed")
        assert str(path) not in listed(registered)
        # no commit on it: main already has everything the branch has
        await until(lambda: not git(registered, "branch", "--list", claim["branch"]), what="the branch to go")
        # claimed again: a new worktree, a new branch from the base
        again = await call(alice, "claim_task", task_id=task_id, worktree=True)
        assert Path(again["worktree"]).is_dir() and branch_of(again["worktree"]) == claim["branch"]


async def test_claiming_again_after_removal_checks_out_the_same_branch_with_its_commits(
    registered: Path, connect, sweeper
):
    sweeper()
    async with connect("alice") as alice:
        task_id, claim = await claim_in_repo(alice)
        path = Path(claim["worktree"])
        (path / "app.py").write_text("print('started')\n")
        git(path, "commit", "-qam", "start")
        tip = git(path, "rev-parse", "HEAD")
        await call(alice, "release_task", task_id=task_id, token=claim["token"])
        await until(lambda: gone(registered, path), what="the released card's worktree to be removed")
        again = await call(alice, "claim_task", task_id=task_id, worktree=True)
        assert again["branch"] == claim["branch"] and git(Path(again["worktree"]), "rev-parse", "HEAD") == tip
        assert "earlier claim" in again["message"]


async def test_the_worktree_goes_when_the_lease_expires(registered: Path, store_target: str, connect, manager):
    short = Board(Store(store_target), lease_seconds=1)
    try:
        async with connect("alice", on=short) as alice:
            task_id, claim = await claim_in_repo(alice)
            path = Path(claim["worktree"])
            assert path.is_dir()
        # nobody reads the board: the sweeper's poll returns the expired lease to todo, then removes the worktree
        worker = WorktreeSweeper(WorktreeManager(short, manager.git), poll_seconds=0.2).start()
        try:
            await until(lambda: gone(registered, path), what="the expired claim's worktree to be removed")
        finally:
            worker.stop()
        assert short.get(task_id).status == "todo"
    finally:
        short.store.close()


async def test_a_card_another_agent_claims_loses_the_first_agents_worktree(
    registered: Path, connect, sweeper, board: Board
):
    async with connect("alice") as alice, connect("bob") as bob:
        task_id, first = await claim_in_repo(alice)
        await call(alice, "release_task", task_id=task_id, token=first["token"])
        second = await call(bob, "claim_task", task_id=task_id, worktree=True)
        assert second["branch"] == f"hb/bob/{task_id}" and second["worktree"] != first["worktree"]
        sweeper()
        await until(lambda: gone(registered, Path(first["worktree"])), what="alice's worktree to be removed")
        assert Path(second["worktree"]).is_dir()  # bob holds the card: his stays


async def test_prune_removes_an_orphan_and_a_worktree_no_card_keeps(
    registered: Path, connect, board: Board, tmp_path: Path, node_env, store_target: str
):
    async with connect("alice") as alice:
        task_id, claim = await claim_in_repo(alice)
        await call(alice, "release_task", task_id=task_id, token=claim["token"])
    # no sweeper ran (the server was down): the worktree outlived its claim
    path = Path(claim["worktree"])
    assert path.is_dir()
    stray = registered / ".hiveboard" / "worktrees" / "stray"
    git(registered, "worktree", "add", "-q", "-b", "hb/nobody/9", str(stray), "main")
    home = tmp_path if "://" not in store_target else tmp_path / "home"
    out = run_cli("--home", str(home), "worktree", "prune", env=node_env)
    assert out.returncode == 0, out.stderr
    assert f"removed worktree {path}" in out.stdout and f"removed worktree {stray}" in out.stdout
    assert not path.exists() and not stray.exists()
    assert listed(registered) == [str(registered)]
    assert "deleted branch hb/nobody/9" in out.stdout
    again = run_cli("--home", str(home), "worktree", "prune", env=node_env)
    assert again.returncode == 0 and "nothing to prune" in again.stdout


# ----------------------------------------------------------------- refused in one sentence, nothing written


async def test_worktree_on_a_card_without_a_repository_is_refused(registered: Path, connect, board: Board):
    async with connect("alice") as alice:
        card = await call(alice, "create_task", title="Plain card")
        error = await call_error(alice, "claim_task", task_id=card["id"], worktree=True)
        assert "names no repository" in error and "worktree=true" in error
        task = await call(alice, "get_task", task_id=card["id"])
        assert task["status"] == "todo" and [h["action"] for h in task["history"]] == ["created"]


async def test_create_task_with_an_unknown_repository_is_refused_naming_the_registered(registered: Path, connect):
    async with connect("alice") as alice:
        error = await call_error(alice, "create_task", title="Somewhere", repo="nope")
        assert "no repository named 'nope'" in error and "registered: app" in error
        assert (await call(alice, "list_tasks"))["total"] == 0


async def test_a_worktree_that_cannot_be_made_undoes_the_claim(registered: Path, connect, board: Board):
    (registered / ".hiveboard").write_text("a file where the worktrees directory goes\n")
    async with connect("alice") as alice:
        card = await call(alice, "create_task", title="Fix it", repo="app")
        error = await call_error(alice, "claim_task", task_id=card["id"], worktree=True)
        assert "nothing was claimed" in error and ".hiveboard" in error
        task = await call(alice, "get_task", task_id=card["id"])
        assert task["status"] == "todo" and task.get("assignee") is None
    assert board.worktrees.live(card["id"], "alice") is None


async def test_without_the_sandbox_no_worktree_is_made_and_nothing_is_claimed(registered: Path, board: Board):
    no_sandbox = WorktreeManager(board, Git(bwrap=None, hidden=(), unsafe=False))
    server = build_server(board, Identity(board.agents, "memory", agent="alice"), worktrees=no_sandbox)
    async with Client(server) as alice:
        card = await call(alice, "create_task", title="Fix it", repo="app")
        error = await call_error(alice, "claim_task", task_id=card["id"], worktree=True)
        assert "bubblewrap is not installed" in error and "nothing was claimed" in error
        task = await call(alice, "get_task", task_id=card["id"])
        assert task["status"] == "todo" and [h["action"] for h in task["history"]] == ["created"]
    assert listed(registered) == [str(registered)]
    with pytest.raises(GitError, match="bubblewrap is not installed"):
        no_sandbox.inspect(registered, "main")


async def test_a_branch_hiveboard_did_not_make_is_not_taken_over(registered: Path, connect):
    git(registered, "branch", "hb/alice/1", "main")
    async with connect("alice") as alice:
        card = await call(alice, "create_task", title="Fix it", repo="app")
        assert card["id"] == 1
        error = await call_error(alice, "claim_task", task_id=1, worktree=True)
        assert "hb/alice/1 already exists" in error and "nothing was claimed" in error


async def test_the_repositorys_own_filters_hooks_and_fsmonitor_never_run_on_the_host(
    registered: Path, connect, tmp_path: Path
):
    marks = tmp_path / "marks"
    marks.mkdir()
    # what an agent can write into the shared .git/config and hooks, and into the files a checkout reads
    git(registered, "config", "filter.shout.smudge", f"touch {marks}/smudge; tr a-z A-Z")
    git(registered, "config", "filter.shout.clean", "cat")
    git(registered, "config", "core.fsmonitor", f"touch {marks}/fsmonitor")
    hook = registered / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marks}/post-checkout\n")
    hook.chmod(0o755)
    (registered / ".gitattributes").write_text("*.txt filter=shout\n")
    (registered / "loud.txt").write_text("quiet\n")
    git(registered, "-c", "core.fsmonitor=false", "add", ".gitattributes", "loud.txt")
    git(registered, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "commit", "-qm", "attributes")
    assert not list(marks.iterdir())
    async with connect("alice") as alice:
        _, claim = await claim_in_repo(alice)
    path = Path(claim["worktree"])
    assert (path / "loud.txt").read_text() == "QUIET\n"  # the filter did run: inside the sandbox
    assert not list(marks.iterdir())


async def test_hiveboard_serve_gives_worktrees_and_removes_them_when_cards_end(
    repo: Path, tmp_path: Path, node_env, store_target: str
):
    """The whole way an operator runs it: `repo add`, then `hiveboard serve` (stdio, review off), whose background
    sweeper removes the worktree of a card that is done."""
    home = tmp_path / "home"
    added = run_cli("--home", str(home), "repo", "add", str(repo), "--name", "app", env=node_env)
    assert added.returncode == 0, added.stderr
    env = {**node_env, "HIVEBOARD_AGENT": "alice", "HIVEBOARD_REVIEW__ENABLED": "false"}
    async with stdio_server(home, env=env) as alice:
        task_id, claim = await claim_in_repo(alice)
        path = Path(claim["worktree"])
        assert branch_of(claim["worktree"]) == f"hb/alice/{task_id}" and (path / ".env").is_file()
        done = await call(alice, "complete_task", task_id=task_id, token=claim["token"], output="nothing to change")
        assert done["status"] == "done"
        await until(lambda: gone(repo, path), what="the server's sweeper to remove the done card's worktree")
    assert listed(repo) == [str(repo)]


# ----------------------------------------------------------------- the command line


def test_repo_add_list_remove(repo: Path, tmp_path: Path, board: Board, node_env, store_target: str):
    home = tmp_path if "://" not in store_target else tmp_path / "home"
    out = run_cli(
        "--home", str(home), "repo", "add", str(repo / "."), "--name", "app", "--test", "pytest -q", env=node_env
    )
    assert out.returncode == 0, out.stderr
    assert "registered app" in out.stdout
    saved = board.repos.get("app")
    assert saved.path == str(repo) and saved.git_dir == str(repo / ".git") and saved.base == "main"
    assert saved.test_command == "pytest -q" and saved.merge_mode == "auto"
    listing = run_cli("--home", str(home), "repo", "list", env=node_env)
    assert listing.returncode == 0 and f"app\t{repo}\tmain\tauto\tpytest -q" in listing.stdout
    board.create("lead", NewTask(title="Open", repo="app"))
    busy = run_cli("--home", str(home), "repo", "remove", "app", env=node_env)
    assert busy.returncode == 2 and "unfinished cards (#1)" in busy.stderr
    board.claim("lead", 1)
    board.complete("lead", 1, 1, "done")
    gone = run_cli("--home", str(home), "repo", "remove", "app", env=node_env)
    assert gone.returncode == 0, gone.stderr
    assert board.repos.list() == []


@pytest.mark.parametrize(
    "case, says",
    [
        ("plain directory", "is not a git repository"),
        ("missing path", "is not a directory"),
        ("no such base", "has no branch 'trunk'"),
        ("bad name", "repository name 'Bad Name' is not allowed"),
        ("taken name", "already registered"),
        ("bare", "is a bare repository"),
        ("empty", "has no commit yet"),
        ("option-looking base", "is not a branch, tag or commit id"),
    ],
)
def test_repo_add_refuses_in_one_sentence_and_writes_nothing(
    case: str, says: str, repo: Path, tmp_path: Path, board: Board, node_env, store_target: str
):
    home = tmp_path if "://" not in store_target else tmp_path / "home"
    other = make_repo(tmp_path / "work" / "other")
    board.repos.add("taken", str(other), str(other / ".git"), "main", None, "auto", "operator")
    path, name, extra = repo, "app", []
    if case == "plain directory":
        path = tmp_path / "plain"
        path.mkdir()
    elif case == "missing path":
        path = tmp_path / "nowhere"
    elif case == "no such base":
        extra = ["--base", "trunk"]
    elif case == "bad name":
        name = "Bad Name"
    elif case == "taken name":
        name = "taken"
    elif case == "bare":
        path = tmp_path / "bare.git"
        git(tmp_path, "clone", "-q", "--bare", str(repo), str(path))
    elif case == "empty":
        path = tmp_path / "empty"
        path.mkdir()
        git(path, "init", "-q", "-b", "main")
    elif case == "option-looking base":
        extra = ["--base=--upload-pack=touch /tmp/x"]
    out = run_cli("--home", str(home), "repo", "add", str(path), "--name", name, *extra, env=node_env)
    assert out.returncode == 2, out
    assert says in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert [r.name for r in board.repos.list()] == ["taken"]
