"""Reading cards: a card's row, its dependencies, and the compact and whole card built from them.

Plain functions of a connection, so that every writer (the board's commands, the state machine, the
review store, contests) reads a card the same way inside its own transaction.
"""

from __future__ import annotations

import json

from ._sqlite_utils import Database
from .db import for_update, iso, placeholders, rows, rows_many
from .errors import NotFound
from .models import RANK_PRIORITY, AcceptanceTests, Artifact, ChangedFile, Commit, HistoryEntry, Task, TaskSummary

ROW = "SELECT * FROM tasks WHERE id = ?"


def row(db: Database, task_id: int) -> dict:
    """The card's database row; NotFound if there is none."""
    found = next(iter(rows(db, for_update(db, ROW), [task_id])), None)
    if found is None:
        raise missing(task_id)
    return found


def missing(task_id: int) -> NotFound:
    return NotFound(f"task {task_id} does not exist; call list_tasks or get_board to see task ids")


def dependencies(db: Database, ids: list[int]) -> dict[int, list[tuple[int, str]]]:
    """Dependencies of each task id, with their status."""
    return needs_by_card(ids, rows(db, DEPENDENCIES.format(placeholders(ids)), ids) if ids else [])


def needs_by_card(ids: list[int], deps: list[dict]) -> dict[int, list[tuple[int, str]]]:
    """(dependency, its status) of each card of `ids`, from DEPENDENCIES rows (rows of other cards left out)."""
    out: dict[int, list[tuple[int, str]]] = {i: [] for i in ids}
    for d in deps:
        if d["task_id"] in out:
            out[d["task_id"]].append((d["depends_on"], d["status"]))
    return out


def needs_of(deps: list[dict]) -> list[tuple[int, str]]:
    """(dependency, its status) of a card's DEPENDENCIES rows."""
    return [(d["depends_on"], d["status"]) for d in deps]


def summary_fields(row: dict, needs: list[tuple[int, str]]) -> dict:
    """The compact card's fields from its row and its dependencies."""
    return dict(
        id=row["id"],
        title=row["title"],
        task_type=row["task_type"],
        priority=RANK_PRIORITY[row["priority"]],
        status=row["status"],
        assignee=row["assignee"],
        reserved_for=row["reserved_for"],
        labels=json.loads(row["labels"]),
        depends_on=[d for d, _ in needs],
        lease_expires_at=iso(row["lease_expires_at"]) if row["status"] == "in_progress" else None,
        version=row["version"],
        unverified=row["unverified"] if row["status"] == "done" else None,
        contest=row["contest"],
        contest_result=row["contest_result"],
        needs_approval=row["approval"],
        evidence=row["evidence"] if row["status"] == "done" else None,
        repo=row["repo"],
    )


def commit_of(row: dict) -> Commit:
    """A `task_refs` row (board/commits.py) as the Commit it records."""
    return Commit(
        repo=row["repo"],
        ref=row["ref"],
        sha=row["sha"],
        base_sha=row["base_sha"],
        files=[ChangedFile(**f) for f in json.loads(row["files"])],
        diff=row["diff"],
    )


def acceptance_tests(row: dict) -> AcceptanceTests | None:
    """The creator's acceptance tests as stored with the card, if any."""
    return AcceptanceTests.model_validate_json(row["acceptance_tests"]) if row["acceptance_tests"] else None


DEPENDENCIES = (
    "SELECT d.task_id, d.depends_on, t.status FROM task_deps d JOIN tasks t ON t.id = d.depends_on "
    "WHERE d.task_id IN ({}) ORDER BY d.depends_on"
)
# the current claim's artifacts: by the card's fencing token, looked up in the same statement (so that it
# needs no answer read before it)
ARTIFACTS = (
    "SELECT name, kind, content FROM artifacts WHERE task_id = ? AND "
    "fencing_token = (SELECT fencing_token FROM tasks WHERE id = ?) ORDER BY id"
)
# the current claim's latest commit (complete_task ref=), by the card's token in the same statement
CURRENT_COMMIT = (
    "SELECT * FROM task_refs WHERE task_id = ? AND fencing_token = (SELECT fencing_token FROM tasks WHERE id = ?) "
    "ORDER BY id DESC LIMIT 1"
)
HISTORY = "SELECT * FROM (SELECT * FROM task_history WHERE task_id = ? ORDER BY id DESC LIMIT ?) AS h ORDER BY id"


def task(
    db: Database,
    row: dict,
    history: int,
    viewer: str | None = None,
    artifacts: bool = True,
    deps: list[dict] | None = None,
) -> Task:
    """The whole card as `viewer` may see it, with its newest `history` entries (oldest first): hidden
    acceptance tests only for their creator. `artifacts=False`: the caller knows the current claim has none;
    `deps`: its DEPENDENCIES rows, when the caller read them in this transaction."""
    _, *parts = _parts(db, row["id"], history, artifacts, deps=deps)
    return _whole(row, *parts, viewer)


def task_by_id(db: Database, task_id: int, history: int, viewer: str | None = None) -> Task:
    """`task` of the card `task_id`, its row read with the rest (one round trip on a database server)."""
    return task_from(rows_many(db, whole_statements(task_id, history)), task_id, history, viewer)


def whole_statements(task_id: int, history: int) -> list[tuple[str, list]]:
    """The statements that read a whole card, its row first (task_from builds it from their rows)."""
    return _statements(task_id, history, True, with_row=True)


def task_from(got: list[list[dict]], task_id: int, history: int, viewer: str | None = None) -> Task:
    """The whole card from the rows of whole_statements(task_id, history); NotFound if it has no row."""
    found, *parts = _unpack(iter(got), True, True, bool(history), None)
    if not found:
        raise missing(task_id)
    return _whole(found[0], *parts, viewer)


def _parts(
    db: Database, task_id: int, history: int, artifacts: bool, with_row: bool = False, deps: list[dict] | None = None
) -> tuple:
    """A whole card's statements, read together: (its row's rows or None, dependencies, artifacts, the current
    claim's commit, history). `deps`: the dependencies, already read."""
    got = iter(rows_many(db, _statements(task_id, history, artifacts, with_row, deps is None)))
    return _unpack(got, with_row, artifacts, bool(history), deps)


def _statements(
    task_id: int, history: int, artifacts: bool, with_row: bool = False, with_deps: bool = True
) -> list[tuple[str, list]]:
    statements = [(ROW, [task_id])] if with_row else []
    if with_deps:
        statements.append((DEPENDENCIES.format("?"), [task_id]))
    if artifacts:
        statements.append((ARTIFACTS, [task_id, task_id]))
        statements.append((CURRENT_COMMIT, [task_id, task_id]))
    if history:
        statements.append((HISTORY, [task_id, history]))
    return statements


def _unpack(got, with_row: bool, artifacts: bool, history: bool, deps: list[dict] | None) -> tuple:
    found = next(got) if with_row else None
    deps = next(got) if deps is None else deps
    attached, commit = (next(got), next(got)) if artifacts else ([], [])
    return found, deps, attached, commit, next(got) if history else []


def _whole(
    row: dict, deps: list[dict], attached: list[dict], commit: list[dict], hist_rows: list[dict], viewer
) -> Task:
    needs = needs_of(deps)
    attached = [Artifact(name=a["name"], kind=a["kind"], content=a["content"]) for a in attached]
    hist = [
        HistoryEntry(
            at=iso(h["at"]),
            actor=h["actor"],
            action=h["action"],
            from_status=h["from_status"],
            to_status=h["to_status"],
            note=h["note"],
        )
        for h in hist_rows
    ]
    waiting = [d for d, status in needs if status != "done"]
    tests, hidden = acceptance_tests(row), 0
    if tests is not None and tests.hidden and viewer != row["created_by"]:
        tests, hidden = None, len(tests.files) + len(tests.commands)
    return Task(
        **summary_fields(row, needs),
        description=row["description"],
        acceptance_criteria=json.loads(row["acceptance_criteria"]),
        acceptance_tests=tests,
        hidden_tests=hidden,
        waived=json.loads(row["waived"]),
        created_by=row["created_by"],
        created_at=iso(row["created_at"]),
        updated_at=iso(row["updated_at"]),
        ready=not waiting,
        waiting_on=waiting,
        blocked_reason=row["blocked_reason"],
        summary=row["summary"],
        output=row["output"],
        artifacts=attached,
        commit=commit_of(commit[0]) if commit else None,
        history=hist,
        paths=json.loads(row["paths"]),
    )


def summarize(db: Database, row: dict, needs: list[tuple[int, str]] | None = None) -> TaskSummary:
    """The compact card (what a change answers with; get_task has the rest). `needs`: its dependencies
    when the caller knows them (a new card without any), else they are read."""
    return TaskSummary(**summary_fields(row, dependencies(db, [row["id"]])[row["id"]] if needs is None else needs))
