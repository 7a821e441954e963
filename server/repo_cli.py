"""`hiveboard repo add|list|remove` and `hiveboard worktree prune`: the repositories cards are worked in, and
the worktrees given at claim (server/worktrees.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hiveboard.board import Board

    from .config import Settings
    from .worktrees import WorktreeManager

    ManagerFor = Callable[[Board], WorktreeManager]


def repo(args: argparse.Namespace, settings: Settings, manager_for: ManagerFor) -> int:
    """`hiveboard repo add|list|remove`; `manager_for(board)` gives git as `serve` runs it."""
    from hiveboard.board.repos import check_repo_name
    from hiveboard.critics.git import GitError

    from .stores import open_board

    if args.action == "add":
        if not args.target or not args.name:
            print(
                "hiveboard: repo add needs PATH and --name NAME, e.g. hiveboard repo add . --name app", file=sys.stderr
            )
            return 2
        check_repo_name(args.name)  # before git runs: a bad name is refused whatever the path
    elif args.action == "remove" and not args.target:
        print("hiveboard: repo remove needs the NAME, e.g. hiveboard repo remove app", file=sys.stderr)
        return 2
    board = open_board(settings, read_only=args.action == "list")
    if args.action == "list":
        repos = board.repos.list()
        print("name\tpath\tbase\tmerge\ttest")
        for r in repos:
            print(f"{r.name}\t{r.path}\t{r.base}\t{r.merge_mode}\t{r.test_command or '-'}")
        if not repos:
            print("hiveboard: no repositories yet; add one with hiveboard repo add PATH --name NAME", file=sys.stderr)
        return 0
    manager = manager_for(board)
    if args.action == "add":
        try:
            top, git_dir = manager.inspect(Path(args.target), args.base)
        except GitError as exc:
            print(f"hiveboard: {exc}; nothing was registered", file=sys.stderr)
            return 2
        repo = board.repos.add(args.name, top, git_dir, args.base, args.test, args.merge, "operator")
        print(
            f"registered {repo.name}: {repo.path} (base {repo.base}, merge {repo.merge_mode}, test "
            f"{repo.test_command or 'none'}); cards name it with create_task(repo={repo.name!r})"
        )
        return 0
    # the worktrees of its ended cards go first: a done card does not stop the removal, and its worktree
    # would be left with no repository to remove it from
    for line in _sweep(manager):
        print(line)
    repo = board.repos.remove(args.target)
    print(f"removed {repo.name} from the registry; {repo.path}, its branches and worktrees on disk stay")
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
