"""The board layer: SQLite store, tasks, claims, agents. Knows nothing of MCP.

Its names are imported from their modules when first used (PEP 562), so that a light module of the package
(board/hook_view.py, what `hiveboard hook` reads with) does not pay for the rest of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    "Agents": "agents",
    "check_name": "agents",
    "Store": "db",
    "iso": "db",
    "now": "db",
    "BoardError": "errors",
    "Conflict": "errors",
    "Forbidden": "errors",
    "IllegalTransition": "errors",
    "InvalidInput": "errors",
    "NotFound": "errors",
    "NotYourClaim": "errors",
    "OverQuota": "errors",
    "StaleToken": "errors",
    "Unavailable": "errors",
    "Limits": "limits",
    "AcceptanceTests": "models",
    "Agent": "models",
    "Artifact": "models",
    "BoardView": "models",
    "Claim": "models",
    "HistoryEntry": "models",
    "KNOWN_TASK_TYPES": "models",
    "Lease": "models",
    "NewTask": "models",
    "Page": "models",
    "STATUSES": "models",
    "Task": "models",
    "TaskEdit": "models",
    "TaskSummary": "models",
    "QuotaConfig": "quotas",
    "BoardStats": "review_models",
    "Critique": "review_models",
    "CritiqueRecord": "review_models",
    "Resolution": "review_models",
    "ReviewIssue": "review_models",
    "ReviewJob": "review_models",
    "ReviewTrail": "review_models",
    "Synthesis": "review_models",
    "Board": "tasks",
}

__all__ = [
    "AcceptanceTests",
    "Agent",
    "Agents",
    "Artifact",
    "Board",
    "BoardError",
    "BoardStats",
    "BoardView",
    "Claim",
    "Conflict",
    "Critique",
    "CritiqueRecord",
    "Forbidden",
    "HistoryEntry",
    "IllegalTransition",
    "InvalidInput",
    "KNOWN_TASK_TYPES",
    "Lease",
    "Limits",
    "NewTask",
    "NotFound",
    "NotYourClaim",
    "OverQuota",
    "Page",
    "QuotaConfig",
    "Resolution",
    "ReviewIssue",
    "ReviewJob",
    "ReviewTrail",
    "STATUSES",
    "StaleToken",
    "Store",
    "Synthesis",
    "Task",
    "TaskEdit",
    "TaskSummary",
    "Unavailable",
    "check_name",
    "iso",
    "now",
]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # looked up once
    return value


if TYPE_CHECKING:  # what type checkers and editors see
    from .agents import Agents, check_name
    from .db import Store, iso, now
    from .errors import (
        BoardError,
        Conflict,
        Forbidden,
        IllegalTransition,
        InvalidInput,
        NotFound,
        NotYourClaim,
        OverQuota,
        StaleToken,
        Unavailable,
    )
    from .limits import Limits
    from .models import (
        KNOWN_TASK_TYPES,
        STATUSES,
        AcceptanceTests,
        Agent,
        Artifact,
        BoardView,
        Claim,
        HistoryEntry,
        Lease,
        NewTask,
        Page,
        Task,
        TaskEdit,
        TaskSummary,
    )
    from .quotas import QuotaConfig
    from .review_models import (
        BoardStats,
        Critique,
        CritiqueRecord,
        Resolution,
        ReviewIssue,
        ReviewJob,
        ReviewTrail,
        Synthesis,
    )
    from .tasks import Board
