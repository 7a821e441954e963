"""Hostile refs and repositories: each refused in one sentence with nothing handed in, or, for a repository whose
config and attributes are an agent's, reviewed and merged without running any of it on the host."""

from __future__ import annotations

import json
import time

import pytest
from conftest import call, call_error, needs_sandbox
from git_repos import CALC, card_on, git, make_repo, needs_git, on_repo, register, settled, work_on
from reviewing import NO_BUILTINS

from hiveboard.critics.config import RepoLimits, ReviewConfig
from hiveboard.critics.engine import ReviewEngine

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_git]

TESTS_ONLY = ReviewConfig(
    critics={k: v for k, v in NO_BUILTINS.items() if k != "acceptance"}, task_types={"code": ["tests"]}
)


async def test_hostile_refs_are_refused_in_one_sentence_and_leave_the_card_as_it_was(connect, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    other = make_repo(tmp_path / "other", {"elsewhere.py": "x = 1\n"})
    marker = tmp_path / "touched"
    # each branch is a commit an agent could hand in
    for name, link, target in (("passwd", "passwd", "/etc/passwd"), ("climb", "deep/x", "../../x")):
        where = tmp_path / f"wt-{name}"
        git(repo, "worktree", "add", "-q", "-b", name, str(where), "main")
        (where / link).parent.mkdir(parents=True, exist_ok=True)
        (where / link).symlink_to(target)
        git(where, "add", "-A")
        git(where, "commit", "-q", "-m", f"a link to {target}")
    work_on(repo, "big", tmp_path / "wt-big", {"data.txt": "x" * 200_000})
    git(repo, "worktree", "add", "-q", "-b", "submodule", str(tmp_path / "wt-sub"), "main")
    head = git(other, "rev-parse", "HEAD")
    git(tmp_path / "wt-sub", "update-index", "--add", "--cacheinfo", f"160000,{head},vendor/lib")
    git(tmp_path / "wt-sub", "commit", "-q", "-m", "a submodule")
    engine = ReviewEngine(board, TESTS_ONLY.model_copy(update={"repo": RepoLimits(file_mb=0.1)}))
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "document add")
        before = await call(alice, "get_task", task_id=task_id)
        cases = {
            f"--upload-pack=touch {marker}": "is not a branch, tag or commit id",
            "HEAD@{1}": "is not a branch, tag or commit id",
            "main..passwd": "is not a branch, tag or commit id",
            "main~1": "is not a branch, tag or commit id",
            head: "names no commit in this repository",  # a commit of another repository
            "passwd": "symbolic link to '/etc/passwd', outside the repository's tree",
            "climb": "symbolic link to '../../x', outside the repository's tree",
            "big": "over the bound of 0.1 MB per file (review.repo.file_mb)",
            "submodule": "changes the submodule 'vendor/lib'",
            "main": "changes nothing against calc's base branch 'main'",
        }
        for ref, says in cases.items():
            error = await call_error(alice, "complete_task", task_id=task_id, token=token, output="done", ref=ref)
            assert says in error and "nothing was handed in" in error and "\n" not in error, (ref, error)
        error = await call_error(
            alice,
            "complete_task",
            task_id=task_id,
            token=token,
            output="done",
            ref="big",
            artifacts=[{"name": "calc.py", "content": CALC}],
        )
        assert "send ref= or artifacts=, not both" in error and "\n" not in error
        # a worktree the agent was given, with work not committed: commit first
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": CALC + "\n# more\n"})
        with board.store.write() as db:
            db.execute(
                "INSERT INTO worktrees (task_id, agent, repo, path, branch, base_sha, created_at) "
                "VALUES (?, 'alice', 'calc', ?, 'hb/alice/1', ?, ?)",
                [task_id, str(tmp_path / "wt-alice"), git(repo, "rev-parse", "main"), time.time()],
            )
        (tmp_path / "wt-alice" / "calc.py").write_text(CALC + "\n# more, not committed\n")
        error = await call_error(alice, "complete_task", task_id=task_id, token=token, output="done", ref="hb/alice/1")
        assert "1 uncommitted change(s) ('calc.py'); commit first" in error and "\n" not in error, error
        # a card that names no repository has no commit to hand in
        plain = (await call(alice, "create_task", title="no repository"))["id"]
        claim = await call(alice, "claim_task", task_id=plain)
        error = await call_error(alice, "complete_task", task_id=plain, token=claim["token"], output="x", ref="main")
        assert f"task {plain} names no repository" in error and "\n" not in error
        after = await call(alice, "get_task", task_id=task_id)
    assert (after["status"], after["version"], after.get("commit")) == ("in_progress", before["version"], None)
    assert not marker.exists()
    assert git(repo, "for-each-ref", "refs/hiveboard/") == ""  # nothing pinned
    with board.store.read() as db:
        assert db.execute("SELECT count(*) FROM task_refs").fetchone()[0] == 0


@needs_sandbox
async def test_a_repositorys_own_filters_drivers_and_hooks_run_nowhere_on_the_host(connect, reviewer, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    marker = tmp_path / "ran-on-the-host"
    top = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """The sum."""\n')
    bottom = CALC.replace("def mul(a, b):\n", 'def mul(a, b):\n    """The product."""\n')
    work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": top})
    # bob's commit asks for the repository's drivers on every file, and would hide calc.py from an export
    attributes = "* filter=evil merge=evil diff=evil\ncalc.py export-ignore\n"
    bob_sha = work_on(repo, "hb/bob/2", tmp_path / "wt-bob", {"calc.py": bottom, ".gitattributes": attributes})
    # an agent can write the repository's config (a worktree shares it): every driver touches a file on the host
    touch = f"touch {marker}"
    config = {
        "filter.evil.smudge": f"sh -c '{touch}; cat'",
        "filter.evil.clean": f"sh -c '{touch}; cat'",
        "merge.evil.driver": f"sh -c '{touch}; false'",
        "diff.evil.textconv": f"sh -c '{touch}; cat'",
        "diff.external": f"sh -c '{touch}'",
        "core.fsmonitor": touch,
        "core.hooksPath": str(tmp_path / "hooks"),
    }
    (tmp_path / "hooks").mkdir()
    for hook in ("post-merge", "post-checkout", "reference-transaction", "pre-merge-commit"):
        (tmp_path / "hooks" / hook).write_text(f"#!/bin/sh\n{touch}\n")
        (tmp_path / "hooks" / hook).chmod(0o755)
    for key, value in config.items():
        git(repo, "config", key, value)
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        one, alice_token = await card_on(alice, board, "document add")
        two, bob_token = await card_on(bob, board, "document mul")
        await call(alice, "complete_task", task_id=one, token=alice_token, output="documented", ref="hb/alice/1")
        assert (await settled(alice, one))["status"] == "done"
        # main moved: bob's commit is merged with a three-way merge of calc.py, where the merge driver would run
        await call(bob, "complete_task", task_id=two, token=bob_token, output="documented", ref="hb/bob/2")
        card = await settled(bob, two)
        review = await call(bob, "get_review", task_id=two, full=True)
    assert card["status"] == "done", json.dumps([card["history"][-3:], review["rounds"][-1]["critiques"]])
    assert not marker.exists()
    merged = (repo / "calc.py").read_text()  # the main worktree, fast-forwarded in the sandbox
    assert '"""The sum."""' in merged and '"""The product."""' in merged
    assert git(repo, "merge-base", "--is-ancestor", bob_sha, "main") == ""


async def test_a_card_naming_a_repository_it_is_not_worked_in_cannot_take_its_commit(connect, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    other = make_repo(tmp_path / "other")
    register(board, repo)
    register(board, other, name="other")
    sha = work_on(other, "feature", tmp_path / "wt", {"calc.py": CALC + "\n# other\n"})
    async with connect("alice", wants_review=lambda card: True) as alice:
        task_id, token = await card_on(alice, board, "document add")
        # the branch exists only in the other repository, and its commit id is unknown to this one
        for ref in ("feature", sha):
            error = await call_error(alice, "complete_task", task_id=task_id, token=token, output="x", ref=ref)
            assert "names no commit in this repository" in error and "'calc'" in error, error
    on_repo(board, task_id, "other")  # the same card, had it named the other repository
    async with connect("alice") as alice:  # a server that reviews nothing: a commit is only handed in to be reviewed
        error = await call_error(alice, "complete_task", task_id=task_id, token=token, output="x", ref="feature")
        assert "review is off" in error and "\n" not in error
    assert git(other, "for-each-ref", "refs/hiveboard/") == ""
