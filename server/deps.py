"""What the tool modules share: the board, who is calling, memory and review routing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hiveboard.board.models import TaskSummary
from hiveboard.board.tasks import Board

from .identity import Identity

if TYPE_CHECKING:
    from hiveboard.critics.commits import Repository
    from hiveboard.memory.service import Memory

    from .worktrees import WorktreeManager


@dataclass
class Deps:
    board: Board
    identity: Identity
    memory: Memory | None = None
    wants_review: Callable[[TaskSummary], bool] | None = None  # None: completed cards go straight to done
    worktrees: WorktreeManager | None = None  # git worktrees given at claim (claim_task worktree=true)
    repository: Callable[[str], Repository] | None = None  # a registered repository, for git in the sandbox
