"""`hiveboard repo add|list|remove|adopt|reset|log` and `hiveboard worktree prune`: the repositories cards are
worked in, where the merge queue left their base branch (critics/base_branch.py), and the worktrees given at claim
(server/worktrees.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board

    from .config import Settings
    from .worktrees import WorktreeManager

    ManagerFor = Callable[[Board], WorktreeManager]


def repo(args: argparse.Namespace, settings: Settings, manager_for: ManagerFor) -> int:
    """`hiveboard repo add|list|remove|adopt|reset|log`; `manager_for(board)` gives git as `serve` runs it."""
    from hiveboard.board.repos import check_repo_name
    from hiveboard.critics.base_branch import install_hook, remove_hook
    from hiveboard.critics.commits import Repository
    from hiveboard.critics.config import RepoLimits
    from hiveboard.critics.git import GitError

    from .stores import open_board

    if args.action == "add":
        if not args.target or not args.name:
            print(
                "hiveboard: repo add needs PATH and --name NAME, e.g. hiveboard repo add . --name app", file=sys.stderr
            )
            return 2
        check_repo_name(args.name)  # before git runs: a bad name is refused whatever the path
    elif args.action != "list" and not args.target:
        print(f"hiveboard: repo {args.action} needs the NAME, e.g. hiveboard repo {args.action} app", file=sys.stderr)
        return 2
    board = open_board(settings, read_only=args.action in ("list", "log"))
    if args.action == "list":
        repos = board.repos.list()
        print("name\tpath\tbase\tmerge\ttest\tlanded")
        for r in repos:
            state = (r.landed or "-")[:12] + (f" (moved to {r.moved_to[:12]}: merging stopped)" if r.moved_to else "")
            print(f"{r.name}\t{r.path}\t{r.base}\t{r.merge_mode}\t{r.test_command or '-'}\t{state}")
        if not repos:
            print("hiveboard: no repositories yet; add one with hiveboard repo add PATH --name NAME", file=sys.stderr)
        return 0
    if args.action == "log":
        print("at\thow\tcommit\tby\ttask\tnote")
        for landing in board.repos.landings(board.repos.get(args.target).name):
            note = (landing.note or "").split("\n", 1)[0]
            print(f"{landing.at}\t{landing.how}\t{landing.sha[:12]}\t{landing.actor}\t{landing.task_id or '-'}\t{note}")
        return 0
    manager = manager_for(board)
    if args.action == "add":
        try:
            top, git_dir = manager.inspect(Path(args.target), args.base)
            tip = manager.git.run(Path(top), ["rev-parse", "--verify", f"refs/heads/{args.base}^{{commit}}"]).text
        except GitError as exc:
            print(f"hiveboard: {exc}; nothing was registered", file=sys.stderr)
            return 2
        repo = board.repos.add(args.name, top, git_dir, args.base, args.test, args.merge, "operator", tip.strip())
        print(
            f"registered {repo.name}: {repo.path} (base {repo.base} at {tip.strip()[:12]}, merge {repo.merge_mode}, "
            f"test {repo.test_command or 'none'}); cards name it with create_task(repo={repo.name!r})"
        )
        if repo.merge_mode == "auto":
            problem = install_hook(Repository(manager.git, repo, RepoLimits()))
            print(
                f"hiveboard: {problem}"
                if problem
                else f"{repo.base} moves only through the merge queue: a reference-transaction hook in {git_dir} "
                "refuses other updates, and a base moved anyway stops merging until a person decides",
                file=sys.stderr,
            )
        return 0
    if args.action in ("adopt", "reset"):
        return _decide(board, Repository(manager.git, board.repos.get(args.target), RepoLimits()), args)
    # the worktrees of its ended cards go first: a done card does not stop the removal, and its worktree
    # would be left with no repository to remove it from
    for line in _sweep(manager):
        print(line)
    repo = board.repos.remove(args.target)
    unhooked = "; its base is no longer the merge queue's (hook taken out)" if remove_hook(repo) else ""
    print(f"removed {repo.name} from the registry; {repo.path}, its branches and worktrees on disk stay{unhooked}")
    return 0


def _decide(board: Board, repository, args: argparse.Namespace) -> int:
    """`repo adopt NAME`: the commits that moved the base outside the queue are taken as reviewed; `repo reset NAME`:
    the base goes back to where the queue left it (a compare-and-swap from the tip found). Either is recorded with
    who decided, and merging goes on."""
    import getpass

    from hiveboard.critics.base_branch import base_moved

    repo, who = repository.repo, args.by or f"operator ({getpass.getuser()})"
    if repo.merge_mode != "auto":
        print(
            f"hiveboard: {repo.name} is merged by a person (merge manual); its base is not the queue's", file=sys.stderr
        )
        return 2
    tip, moved = base_moved(board, repository)
    if moved is None:
        print(f"{repo.name}'s {repo.base} is where the merge queue left it ({(tip or '')[:12]}); nothing to do")
        return 0
    what = moved.commits()
    if args.action == "adopt" and moved.tip is None:
        print(
            f"hiveboard: {repo.base} was deleted: there is nothing to adopt; run hiveboard repo reset {repo.name}",
            file=sys.stderr,
        )
        return 2
    if args.action == "adopt":
        note = f"{who} adopted {repo.base} at {moved.tip[:12]} as reviewed ({what}); merging into {repo.name} goes on"
        board.merges.decide_base(repo.name, "adopted", moved.tip, who, note)
    else:
        gone = "0" * len(moved.recorded)  # update-ref's old value for "must not exist"
        if not repository.advance(repo.base, moved.recorded, moved.tip or gone, "reset to the merge queue's tip"):
            print(f"hiveboard: {repo.base} moved again while it was being reset; run this again", file=sys.stderr)
            return 1
        note = (
            f"{who} reset {repo.name}'s {repo.base} from {moved.found[:12]} to {moved.recorded[:12]}, where the merge "
            f"queue left it ({what}); merging into {repo.name} goes on"
        )
        where = repository.worktree_of(repo.base)
        if where is not None:
            note += f"; {where} has {repo.base} checked out: its files were not touched (git status there)"
        board.merges.decide_base(repo.name, "reset", moved.recorded, who, note)
    print(note)
    return 0


def _sweep(manager: WorktreeManager) -> list[str]:
    lines, more = manager.sweep()
    while more:
        again, more = manager.sweep()
        lines += again
    return lines


def worktree(args: argparse.Namespace, settings: Settings, manager_for: ManagerFor) -> int:
    """`hiveboard worktree prune`."""
    from .stores import open_board

    manager = manager_for(open_board(settings))
    if problem := manager.git.why_not():
        print(f"hiveboard: {problem}", file=sys.stderr)
        return 2
    lines = manager.prune()
    for line in lines:
        print(line)
    if not lines:
        print("nothing to prune: every worktree belongs to a card that keeps it")
    return 0
