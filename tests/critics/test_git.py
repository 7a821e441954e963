"""critics/git.py: git on a repository an agent may have written to runs confined. A repository whose own
config and attributes make git run commands (a filter, a merge driver, fsmonitor, hooks) runs none of them on
the host; refs that look like options or revision syntax never reach git; output and the data directory are
bounded and covered."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hiveboard.critics.git import Git, GitError, check_ref, resolve

GIT = Git.for_machine()
if GIT.why_not() is not None and os.environ.get("HIVEBOARD_REQUIRE_SANDBOX"):
    raise RuntimeError(f"HIVEBOARD_REQUIRE_SANDBOX is set but git cannot run confined here: {GIT.why_not()}")
pytestmark = pytest.mark.skipif(GIT.why_not() is not None, reason=f"git cannot run confined here: {GIT.why_not()}")


def plain_git(repo: Path, *args: str) -> str:
    """The test's own git (the test's repository is not hostile until the test makes it so)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def hostile_repo(root: Path, marker: Path) -> Path:
    """A repository whose config makes git run `touch marker-<what>` through a smudge and clean filter, a merge
    driver, fsmonitor, a pager, an external diff and hooks."""
    repo = root / "repo"
    repo.mkdir()
    plain_git(repo, "init", "-q", "-b", "main")
    plain_git(repo, "config", "user.name", "t")
    plain_git(repo, "config", "user.email", "t@t")
    (repo / "a.txt").write_text("one\n")
    plain_git(repo, "add", "a.txt")
    plain_git(repo, "commit", "-qm", "one")
    for key, what in (
        ("filter.evil.smudge", "smudge"),
        ("filter.evil.clean", "clean"),
        ("merge.evil.driver", "merge"),
        ("core.fsmonitor", "fsmonitor"),
        ("core.pager", "pager"),
        ("diff.external", "diff"),
    ):
        plain_git(repo, "config", key, f"touch {marker}-{what}; cat")
    (repo / ".gitattributes").write_text("* filter=evil merge=evil\n")
    hooks = repo / ".git" / "hooks"
    for hook in ("post-checkout", "pre-commit", "post-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}-hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    return repo


def markers(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.parent.glob(marker.name + "-*"))


def test_a_hostile_repository_runs_nothing_on_the_host(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = outside / "ran"
    repo = hostile_repo(tmp_path, marker)
    # the same config does run commands with git as a user would run it: the test can fail
    (repo / "b.txt").write_text("two\n")
    plain_git(repo, "add", "b.txt", ".gitattributes")
    assert markers(marker), "the hostile config ran nothing even outside the sandbox"
    for found in outside.iterdir():
        found.unlink()

    plain_git(repo, "commit", "-qm", "two", "--no-verify")
    for found in outside.iterdir():
        found.unlink()
    git_dir = repo / ".git"
    (repo / "a.txt").write_text("changed\n")
    GIT.run(repo, ["status", "--porcelain"])
    GIT.run(repo, ["diff"])
    GIT.run(repo, ["archive", "--format=tar", "HEAD"])
    (tmp_path / "worktrees").mkdir()
    worktree = tmp_path / "worktrees" / "wt"
    GIT.run(repo, ["worktree", "add", "-b", "hb/alice/1", str(worktree), "main"], writable=[git_dir, worktree.parent])
    GIT.run(worktree, ["commit", "-qam", "by the sandbox", "--allow-empty"], writable=[git_dir, worktree])
    GIT.run(repo, ["merge-tree", "--write-tree", "main", "hb/alice/1"], writable=[git_dir], ok=(0, 1))
    assert (worktree / "a.txt").exists()  # the worktree was made, by git in the sandbox
    assert markers(marker) == []


def test_refs_that_look_like_options_or_revision_syntax_never_reach_git(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    plain_git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    plain_git(repo, "add", "a.txt")
    plain_git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = plain_git(repo, "rev-parse", "HEAD").strip()
    assert resolve(GIT, repo, "main") == head
    assert resolve(GIT, repo, head) == head
    for bad in ("--upload-pack=touch /tmp/x", "-n", "HEAD@{1}", "main..main", "main~1", "a b", "", ".hidden", "x.lock"):
        with pytest.raises(GitError, match="not a branch, tag or commit id"):
            check_ref(bad)
    with pytest.raises(GitError, match="names no commit in this repository"):
        resolve(GIT, repo, "0" * 40)  # a commit id this repository does not have


def test_output_is_bounded_and_the_data_directory_covered(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    plain_git(repo, "init", "-q", "-b", "main")
    data = repo / "hb-data"
    data.mkdir()
    (data / "secret.txt").write_text("the database\n")
    (repo / "a.txt").write_text("x" * 10_000)
    plain_git(repo, "add", "a.txt")
    plain_git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    with pytest.raises(GitError, match="printed more than"):
        GIT.run(repo, ["show", "HEAD:a.txt"], limit=1000)
    covered = Git.for_machine(hidden=[data])
    seen = covered.run(repo, ["diff", "--no-index", "/dev/null", str(data / "secret.txt")], ok=(0, 1)).text
    assert "the database" not in seen
    assert (
        "the database" in GIT.run(repo, ["diff", "--no-index", "/dev/null", str(data / "secret.txt")], ok=(0, 1)).text
    )
