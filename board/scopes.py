"""What a write's checks span beyond the rows it reads to change: its scopes (`Store.write(*scopes)`).

On PostgreSQL writes run together and each holds only what its work needs (board/postgres.py): the rows it changes,
and a lock per scope, so that a check over several rows and the write it allows are one step for everyone who
checks the same rows. Two writes of different scopes never wait for each other; a write that names no scope runs
alone. SQLite has one writer at a time, so scopes change nothing there. Standard library only: the hook
(board/hook_view.py) takes an agent's scope too.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

BOARD_LOCK = 0x48495645  # "HIVE": PostgreSQL's advisory lock every write holds, shared or alone (board/postgres.py)

MEMORY = "memory"  # the shared memory's upkeep: its index queue, near-duplicate lessons, the keyword index
REVIEW_QUEUE = "reviews"  # which review worker takes which job
SWEEP = "sweep"  # the lease sweep outside a write (its cards are taken with SKIP LOCKED)
MCP_TASKS = "mcp-tasks"  # the leases of running MCP tasks
BUDGETS = "budgets"  # recorded usage against cards' budgets


def agent(name: str) -> str:
    """A write whose checks count one agent's rows: its quotas and caps, its inbox, its usage, its claims."""
    return f"agent:{name}"


def review(review_id: int) -> str:
    """A write to one review: its critics, critiques, slots and verdict."""
    return f"review:{review_id}"


def repository(name: str) -> str:
    """A write whose checks count one repository's rows (its worktrees)."""
    return f"repo:{name}"


def digest(task_type: str) -> str:
    """The digest of lessons of one task type."""
    return f"digest:{task_type}"


def lock_statement(scopes: Iterable[str], trying: bool = False) -> tuple[str, list]:
    """The PostgreSQL statement that takes a write's locks (board/postgres.py): the board lock alone when there are no
    scopes, else shared, then each scope's lock in the order of their keys (so no two writes wait in a cycle). `trying`: without waiting; it returns
    one row, whose one value says whether all were taken."""
    keys = sorted({key(scope) for scope in scopes})
    try_ = "try_" if trying else ""
    if not keys:
        calls, params = [f"pg_{try_}advisory_xact_lock(?::bigint)"], [BOARD_LOCK]
    else:
        calls = [f"pg_{try_}advisory_xact_lock_shared(?::bigint)"] + [f"pg_{try_}advisory_xact_lock(?, ?)"] * len(keys)
        params = [BOARD_LOCK, *(v for key in keys for v in key)]
    if trying:
        return "SELECT " + " AND ".join(calls), params
    return "SELECT " + ", ".join(calls) + ", true", params


def key(scope: str) -> tuple[int, int]:
    """A scope's advisory lock: two 32-bit keys, the board's and the scope's checksum. Two scopes with one
    checksum share a lock, which is only slower."""
    return BOARD_LOCK, zlib.crc32(scope.encode()) - (1 << 31)
