"""The board layer: SQLite store, tasks, claims, agents. Knows nothing of MCP."""

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
    StaleToken,
)
from .models import (
    KNOWN_TASK_TYPES,
    AcceptanceTests,
    Lease,
    STATUSES,
    Agent,
    Artifact,
    BoardView,
    Claim,
    HistoryEntry,
    NewTask,
    Page,
    Task,
    TaskEdit,
    TaskSummary,
)
from .reviews import (
    BoardStats,
    Critique,
    CritiqueRecord,
    ReviewIssue,
    ReviewJob,
    ReviewTrail,
    Resolution,
    Synthesis,
)
from .tasks import Board, Limits

__all__ = [
    "AcceptanceTests", "Agent", "Agents", "Artifact", "Board", "BoardError", "BoardStats", "BoardView", "Claim", "Conflict", "Critique",
    "CritiqueRecord", "Forbidden", "Resolution", "ReviewIssue", "ReviewJob", "ReviewTrail", "Synthesis",
    "HistoryEntry", "IllegalTransition", "InvalidInput", "KNOWN_TASK_TYPES", "Lease", "Limits", "NewTask", "NotFound",
    "NotYourClaim", "Page", "STATUSES", "StaleToken", "Store", "Task", "TaskEdit", "TaskSummary", "check_name",
    "iso", "now",
]
