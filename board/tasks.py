"""The Kanban board: cards, claims with leases and fencing tokens, transitions and their history.

Every change runs inside `Store.write()` (BEGIN IMMEDIATE), so read-check-write is atomic across
threads and processes; claims are additionally one guarded UPDATE checked by rowcount. Leases that
ran out are swept back to todo before any claim or holder action, and before reads that would
otherwise show them.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from sqlite_utils import Database

from . import transitions
from .agents import OPERATOR_ROLES, Agents
from .db import Store, iso, now, rows
from .digests import Digests
from .knowledge import Knowledge
from .messages import Messages, NewMessage
from .reviews import Reviews
from .transitions import Transition, Via
from .views import Views
from .errors import Conflict, Forbidden, IllegalTransition, InvalidInput, NotFound, NotYourClaim, StaleToken
from .events import TaskChanged
from .models import (
    AcceptanceTests,
    PRIORITY_RANK,
    RANK_PRIORITY,
    STATUSES,
    Artifact,
    BoardView,
    Card,
    Claim,
    Column,
    HistoryEntry,
    NewTask,
    Page,
    Task,
    TaskEdit,
    TaskSummary,
)

TASK_TYPE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
RULE_RE = re.compile(r"^[A-Z]{1,8}[0-9]{0,6}$")  # an analyser's rule id: B324, S608, E501, PLE1142

@dataclass(frozen=True)
class Limits:
    """Size limits; a value over a limit is refused with the limit in the message."""

    description: int = 20_000
    output: int = 200_000
    summary: int = 2_000
    note: int = 4_000
    labels: int = 20
    label_chars: int = 50
    criteria: int = 30
    criterion_chars: int = 500
    test_files: int = 50
    test_chars: int = 200_000
    depends_on: int = 50
    artifacts: int = 20
    artifact_chars: int = 200_000
    history: int = 100
    message_chars: int = 64_000
    message_summary: int = 500
    metadata_chars: int = 8_000


DOING: dict[str, str] = {"claim_task": "renew the claim on", "release_task": "release", "update_task": "update",
                         "complete_task": "complete", "lease": "expire", "review": "review", "decide": "decide"}
CREATOR_ASKED = "asked by its creator"  # the one approval requirement its creator may clear again
ReviewState = Literal["passed", "awaiting approval", "not passed"]
MAX_ATTEMPTS = 5


def _illegal(row: dict, target: str, via: Via) -> str:
    allowed = transitions.targets(row["status"], via)
    return (f"{via} cannot move task {row['id']} from {row['status']} to {target}; from {row['status']} it can go to "
            f"{', '.join(allowed) or 'nothing'}")


def _cursor_encode(priority: int, task_id: int) -> str:
    return base64.urlsafe_b64encode(f"{priority}:{task_id}".encode()).decode()


def _cursor_decode(cursor: str) -> tuple[int, int]:
    try:
        priority, task_id = base64.urlsafe_b64decode(cursor.encode()).decode().split(":")
        return int(priority), int(task_id)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("cursor is not valid: pass the next_cursor value from the previous list_tasks "
                           "answer unchanged, or omit it for the first page") from exc


class Board:
    """Tasks on one SQLite store."""

    def __init__(self, store: Store, lease_seconds: int = 300, limits: Limits = Limits(),
                 approval_rule: Callable[[str, list[str]], str | None] | None = None):
        """`approval_rule(task_type, labels)`: why a new card needs a person's approval after its review passes,
        or None (the review configuration's human_approval; the review engine sets it)."""
        self.store = store
        self.approval_rule = approval_rule
        self.agents = Agents(store)
        self.knowledge = Knowledge(store)
        self.digests = Digests(store)
        self.messages = Messages(store, self.agents, self.knowledge, limits)
        self.lease_seconds = lease_seconds
        self.limits = limits
        self.reviews = Reviews(self)
        self.views = Views(store)

    def post_event(self, db: Database, actor: str, intent: str, task_id: int, summary: str, content: str = "",
                   recipient: str | None = None, metadata: dict | None = None) -> None:
        """Post a board event to the message pool inside the change's own transaction."""
        self.messages.post(db, actor, NewMessage(
            intent=intent, task_id=task_id, recipient=recipient, summary=summary[: self.limits.message_summary],
            content=content[: self.limits.message_chars], metadata={"event": True, **(metadata or {})}))

    # ----------------------------------------------------------------- reading

    def row(self, db: Database, task_id: int) -> dict:
        """The card's database row; NotFound if there is none."""
        row = next(iter(rows(db, "SELECT * FROM tasks WHERE id = ?", [task_id])), None)
        if row is None:
            raise NotFound(f"task {task_id} does not exist; call list_tasks or get_board to see task ids")
        return row

    def _deps(self, db: Database, ids: list[int]) -> dict[int, list[tuple[int, str]]]:
        """Dependencies of each task id, with their status."""
        out: dict[int, list[tuple[int, str]]] = {i: [] for i in ids}
        if not ids:
            return out
        marks = ",".join("?" * len(ids))
        for r in db.execute(f"SELECT d.task_id, d.depends_on, t.status FROM task_deps d JOIN tasks t "
                            f"ON t.id = d.depends_on WHERE d.task_id IN ({marks}) ORDER BY d.depends_on", ids):
            out[r[0]].append((r[1], r[2]))
        return out

    @staticmethod
    def _summary_fields(row: dict, deps: list[tuple[int, str]]) -> dict:
        return dict(
            id=row["id"], title=row["title"], task_type=row["task_type"],
            priority=RANK_PRIORITY[row["priority"]], status=row["status"], assignee=row["assignee"],
            reserved_for=row["reserved_for"],
            labels=json.loads(row["labels"]), depends_on=[d for d, _ in deps],
            lease_expires_at=iso(row["lease_expires_at"]) if row["status"] == "in_progress" else None,
            version=row["version"], unverified=row["unverified"] if row["status"] == "done" else None,
            contest=row["contest"], contest_result=row["contest_result"], needs_approval=row["approval"],
            evidence=row["evidence"] if row["status"] == "done" else None,
        )

    @staticmethod
    def acceptance_tests(row: dict) -> AcceptanceTests | None:
        return AcceptanceTests.model_validate_json(row["acceptance_tests"]) if row["acceptance_tests"] else None

    def _task(self, db: Database, row: dict, history: int | None = None, viewer: str | None = None) -> Task:
        """The card as `viewer` may see it: hidden acceptance tests only for their creator."""
        deps = self._deps(db, [row["id"]])[row["id"]]
        artifacts = [Artifact(name=a["name"], kind=a["kind"], content=a["content"]) for a in rows(
            db, "SELECT name, kind, content FROM artifacts WHERE task_id = ? AND fencing_token = ? ORDER BY id",
            [row["id"], row["fencing_token"]])]
        limit = self.limits.history if history is None else history
        hist = [HistoryEntry(at=iso(h["at"]), actor=h["actor"], action=h["action"], from_status=h["from_status"],
                             to_status=h["to_status"], note=h["note"]) for h in rows(
            db, "SELECT * FROM (SELECT * FROM task_history WHERE task_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id",
            [row["id"], limit])]
        waiting = [d for d, status in deps if status != "done"]
        tests, hidden = self.acceptance_tests(row), 0
        if tests is not None and tests.hidden and viewer != row["created_by"]:
            tests, hidden = None, len(tests.files) + len(tests.commands)
        return Task(
            **self._summary_fields(row, deps),
            description=row["description"], acceptance_criteria=json.loads(row["acceptance_criteria"]),
            acceptance_tests=tests, hidden_tests=hidden, waived=json.loads(row["waived"]), created_by=row["created_by"], created_at=iso(row["created_at"]), updated_at=iso(row["updated_at"]),
            ready=not waiting, waiting_on=waiting, blocked_reason=row["blocked_reason"],
            summary=row["summary"], output=row["output"], artifacts=artifacts, history=hist,
        )

    def summarize(self, db: Database, row: dict) -> TaskSummary:
        """The compact card (what a change answers with; get_task has the rest)."""
        return TaskSummary(**self._summary_fields(row, self._deps(db, [row["id"]])[row["id"]]))

    def summary(self, task_id: int) -> TaskSummary:
        """One card, compactly: what deciding about it (e.g. whether it needs review) takes."""
        self.sweep_expired()
        with self.store.read() as db:
            return self.summarize(db, self.row(db, task_id))

    def get(self, task_id: int, history: int | None = None, viewer: str | None = None) -> Task:
        """One whole card with its recent history (newest `history` entries, oldest first)."""
        self.sweep_expired()
        with self.store.read() as db:
            return self._task(db, self.row(db, task_id), history, viewer)

    def list(self, *, status: str | None = None, task_type: str | None = None, assignee: str | None = None,
             label: str | None = None, ready: bool | None = None, limit: int = 50,
             cursor: str | None = None) -> Page:
        """Cards matching the filters, highest priority first, one bounded page at a time."""
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if not 1 <= limit <= 200:
            raise InvalidInput("limit must be between 1 and 200")
        self.sweep_expired()
        where, params = [], []
        if status:
            where.append("status = ?"), params.append(status)
        if task_type:
            where.append("task_type = ?"), params.append(task_type.strip().lower())
        if assignee:  # an agent's cards: the ones it holds and the ones reserved for it
            where.append("(assignee = ? OR reserved_for = ?)")
            params += [assignee.strip().lower()] * 2
        if label:
            where.append("EXISTS (SELECT 1 FROM json_each(tasks.labels) WHERE value = ?)"), params.append(label)
        if ready is not None:
            clause = ("NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dt ON dt.id = d.depends_on "
                      "WHERE d.task_id = tasks.id AND dt.status != 'done')")
            where.append(clause if ready else f"NOT ({clause})")
        with self.store.read() as db:
            base = " AND ".join(where) or "1"
            total = db.execute(f"SELECT count(*) FROM tasks WHERE {base}", params).fetchone()[0]
            page_where, page_params = base, list(params)
            if cursor:
                prio, last_id = _cursor_decode(cursor)
                page_where += " AND (priority < ? OR (priority = ? AND id > ?))"
                page_params += [prio, prio, last_id]
            found = rows(db, f"SELECT * FROM tasks WHERE {page_where} ORDER BY priority DESC, id LIMIT ?",
                         page_params + [limit + 1])
            more = len(found) > limit
            found = found[:limit]
            deps = self._deps(db, [r["id"] for r in found])
            tasks = [TaskSummary(**self._summary_fields(r, deps[r["id"]])) for r in found]
        next_cursor = _cursor_encode(found[-1]["priority"], found[-1]["id"]) if more else None
        return Page(tasks=tasks, total=total, next_cursor=next_cursor)

    def board(self, top: int = 5) -> BoardView:
        """Counts per column and the top cards of each."""
        if not 0 <= top <= 50:
            raise InvalidInput("top must be between 0 and 50")
        self.sweep_expired()
        with self.store.read() as db:
            counts = dict(db.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall())
            # ready = todo cards minus those still waiting on a dependency, counted from the dependencies (few)
            # rather than by probing every todo card for one; CROSS JOIN keeps SQLite to that order
            waiting = db.execute(
                "SELECT count(DISTINCT d.task_id) FROM task_deps d CROSS JOIN tasks t ON t.id = d.task_id "
                "CROSS JOIN tasks dt ON dt.id = d.depends_on WHERE t.status = 'todo' AND dt.status != 'done'"
            ).fetchone()[0]
            ready = counts.get("todo", 0) - waiting
            columns = []
            for status in STATUSES:
                # done is ordered newest first; the others by what should be picked up next
                order = "updated_at DESC" if status == "done" else "priority DESC, id"
                picked = db.execute(f"SELECT id, title, task_type, priority, assignee, unverified FROM tasks WHERE "
                                    f"status = ? ORDER BY {order} LIMIT ?", [status, top]).fetchall() if top else []
                columns.append(Column(status=status, count=counts.get(status, 0), top=[
                    Card(id=r[0], title=r[1], task_type=r[2], priority=RANK_PRIORITY[r[3]], assignee=r[4],
                         unverified=bool(r[5]) if status == "done" else False)
                    for r in picked]))
        return BoardView(columns=columns, total=sum(counts.values()), ready=ready)

    # ----------------------------------------------------------------- writing helpers

    def move(self, db: Database, row: dict, target: str, via: Via, actor: str, *, token: int | None = None,
             reason: str | None = None, note: str | None = None, sets: dict | None = None, ts: float | None = None,
             action: str | None = None) -> dict:
        """Make one transition of the card state machine (board/transitions.py) inside the caller's write
        transaction: who may and the guards are checked, then `_change` writes it. Returns the new row."""
        rule = transitions.find(row["status"], target, via)
        if rule is None:
            raise IllegalTransition(_illegal(row, target, via))
        self._authorize(rule, row, actor, token)
        for guard in rule.guards:
            self._guard(guard, db, row, actor, target, reason)
        ts = now() if ts is None else ts
        if row["status"] == "review" and via != "review":
            self.reviews.cancel(db, row["id"], f"cancelled: the card left review ({row['status']} → {target} by "
                                f"{actor})", ts)
        implied: dict = {"status": target}
        if target == "in_progress":
            implied.update(lease_expires_at=ts + self.lease_seconds, blocked_reason=None)
        elif target == "todo":
            implied.update(assignee=None, lease_expires_at=None, blocked_reason=None)
        elif target in ("blocked", "needs_human"):
            implied.update(blocked_reason=reason, lease_expires_at=None)
        else:
            implied.update(lease_expires_at=None)
        new = self._change(db, row, actor, action or rule.action, {**implied, **(sets or {})}, note, ts)
        if target == "done":
            self._remember_output(db, new)
        return new

    def _remember_output(self, db: Database, row: dict) -> None:
        """A card's work joins the shared memory when it is done: its review passed, a person passed it, or
        it needed no review (an output a review sends back is not something to learn from). Its holder's
        output, summary and artifact excerpts, in the same transaction as the move."""
        excerpts = "\n".join(f"--- {name} ({kind})\n{content[:2000]}" for name, kind, content in db.execute(
            "SELECT name, kind, content FROM artifacts WHERE task_id = ? AND fencing_token = ? ORDER BY id",
            [row["id"], row["fencing_token"]]))
        text = f"{row['summary'] or ''}\n{(row['output'] or '')[:8000]}\n{excerpts}".strip()
        if text:  # a person may pass a card that was escalated before any output
            self.knowledge.add(db, kind="output", text=text, created_by=row["assignee"] or row["created_by"],
                               task_type=row["task_type"], task_id=row["id"], title=row["title"],
                               tags=json.loads(row["labels"]), source=f"task:{row['id']}")

    def _change(self, db: Database, row: dict, actor: str, action: str, sets: dict, note: str | None,
                ts: float) -> dict:
        """The one write of a card's state: a guarded UPDATE (only the version the caller checked), the
        version bump, the history row and the event."""
        sets = {**sets, "updated_at": ts}
        assignments = ", ".join(f"{column} = ?" for column in sets)
        new = next(iter(rows(db, f"UPDATE tasks SET {assignments}, version = version + 1 WHERE id = ? AND "
                             "version = ? RETURNING *", [*sets.values(), row["id"], row["version"]])), None)
        if new is None:  # cannot happen under the write lock; refuse rather than guess
            raise Conflict(f"task {row['id']} changed meanwhile; call get_task and retry")
        self._history(db, row["id"], actor, action, row["status"], new["status"], note, ts)
        self.store.emit(TaskChanged(row["id"], new["status"]))
        return new

    def _history(self, db: Database, task_id: int, actor: str, action: str, from_status: str | None,
                 to_status: str | None, note: str | None, at: float) -> None:
        db.execute("INSERT INTO task_history (task_id, at, actor, action, from_status, to_status, note) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", [task_id, at, actor, action, from_status, to_status, note])

    def _operator(self, actor: str) -> bool:
        """Whether the agent has a role only the operator grants (a person, or a lead)."""
        agent = self.agents.get(actor, missing_ok=True)
        return agent is not None and agent.role in OPERATOR_ROLES

    def _authorize(self, rule: Transition, row: dict, actor: str, token: int | None) -> None:
        if rule.who == "holder":
            self._holder_check(row, actor, token, DOING[rule.via])
        elif rule.who == "steward" and actor not in (row["assignee"], row["created_by"]):
            if not self._operator(actor):
                raise Forbidden(
                    f"task {row['id']} is {row['status']} ({row['blocked_reason'] or 'no reason given'}); only its "
                    f"holder ({row['assignee'] or 'none'}), its creator ({row['created_by']}) or an agent with the "
                    f"role {' or '.join(OPERATOR_ROLES)} may move it to {rule.target}; ask one of them, or send "
                    "them a message with publish_message")
        elif rule.who == "person":
            if not self._operator(actor):
                raise Forbidden(f"only a person (an agent with the role {' or '.join(OPERATOR_ROLES)}) may move task "
                                f"{row['id']} from {rule.source} to {rule.target}; ask the operator, e.g. with "
                                "publish_message")
        elif rule.who in ("system", "review") and actor != rule.who:
            raise Forbidden(f"only the {'lease sweep' if rule.who == 'system' else 'review'} moves task "
                            f"{row['id']} from {rule.source} to {rule.target}")

    def _guard(self, guard: str, db: Database, row: dict, actor: str, target: str, reason: str | None) -> None:
        task_id = row["id"]
        if guard == "reason" and not reason:
            raise InvalidInput(f"moving task {task_id} to {target} needs reason= saying what it waits on")
        if guard == "reserved" and row["reserved_for"] not in (None, actor):
            raise Forbidden(f"task {task_id} is reserved for {row['reserved_for']}; claim another card")
        if guard == "one_attempt" and row["contest"] is not None:
            other = db.execute("SELECT id FROM tasks WHERE contest = ? AND id != ? AND assignee = ?",
                               [row["contest"], task_id, actor]).fetchone()
            if other:
                raise Forbidden(f"task {task_id} is an attempt of contest {row['contest']} and you made attempt "
                                f"{other[0]}; competing attempts need different agents: claim another card")
        if guard == "ready":
            waiting = [d for d, status in self._deps(db, [task_id])[task_id] if status != "done"]
            if waiting:
                raise Conflict(f"task {task_id} waits on tasks {waiting} that are not done yet; claim one of "
                               "those, or call claim_task without task_id for a ready card")

    def _sweep(self, db: Database, ts: float) -> list[int]:
        expired = [r[0] for r in db.execute(
            "SELECT id FROM tasks WHERE status = 'in_progress' AND lease_expires_at < ?", [ts]).fetchall()]
        for task_id in expired:
            row = self.row(db, task_id)
            self.post_event(db, "system", "status_update", task_id,
                            f"task {task_id} is back in todo: the lease of {row['assignee']} ran out")
            self.move(db, row, "todo", "lease", "system", ts=ts,
                      note=f"lease of {row['assignee']} ran out at {iso(row['lease_expires_at'])}")
        return expired

    def sweep_expired(self) -> list[int]:
        """Before a read: return cards whose lease ran out to todo, if the board can be written at once (a
        cheap read when none ran out). A read never waits for a writer: every write sweeps first."""
        ts = now()
        probe = self.store.db.execute(
            "SELECT 1 FROM tasks WHERE status = 'in_progress' AND lease_expires_at < ? LIMIT 1", [ts]).fetchone()
        if probe is None:
            return []
        with self.store.try_write() as db:
            return [] if db is None else self._sweep(db, ts)

    def _check_text(self, value: str | None, limit: int, what: str) -> None:
        if value is not None and len(value) > limit:
            raise InvalidInput(f"{what} is {len(value)} characters; the limit is {limit}. Shorten it, or put "
                               "long material in an artifact")

    def _check_labels(self, labels: list[str]) -> list[str]:
        clean = list(dict.fromkeys(label.strip() for label in labels))
        if len(clean) > self.limits.labels:
            raise InvalidInput(f"{len(clean)} labels given; at most {self.limits.labels} are allowed")
        for label in clean:
            if not 0 < len(label) <= self.limits.label_chars:
                raise InvalidInput(f"label {label!r} must be 1-{self.limits.label_chars} characters")
        return clean

    def _check_criteria(self, criteria: list[str]) -> None:
        if len(criteria) > self.limits.criteria:
            raise InvalidInput(f"{len(criteria)} acceptance criteria given; at most {self.limits.criteria}")
        for c in criteria:
            self._check_text(c, self.limits.criterion_chars, "an acceptance criterion")

    def _check_tests(self, tests: AcceptanceTests | None) -> str | None:
        """The creator's acceptance tests as stored (JSON), once they are within the limits."""
        if tests is None or not (tests.files or tests.commands):
            return None
        if len(tests.files) > self.limits.test_files or len(tests.commands) > self.limits.criteria:
            raise InvalidInput(f"acceptance_tests has {len(tests.files)} files and {len(tests.commands)} commands; "
                               f"at most {self.limits.test_files} files and {self.limits.criteria} commands")
        if sum(len(f.content) for f in tests.files) > self.limits.test_chars:
            raise InvalidInput(f"acceptance_tests files hold more than {self.limits.test_chars} characters in all; "
                               "send fewer or smaller test files")
        for c in tests.commands:
            self._check_text(c, self.limits.criterion_chars, "an acceptance test command")
        return tests.model_dump_json()

    def _holder_check(self, row: dict, actor: str, token: int | None, doing: str) -> None:
        """Refuse anyone but the current claim holder with its current fencing token."""
        task_id = row["id"]
        if row["status"] not in ("in_progress", "blocked") or row["assignee"] is None:
            if row["status"] == "todo" and token is not None and token == row["fencing_token"] > 0:
                raise StaleToken(f"your claim on task {task_id} ended (lease expired or released) and the card "
                                 f"is back in todo; call claim_task with task_id={task_id} to take it again")
            raise IllegalTransition(f"cannot {doing} task {task_id}: it is {row['status']}, not claimed"
                                    + ("; claim it first with claim_task" if row["status"] == "todo" else ""))
        if row["assignee"] != actor:
            raise NotYourClaim(f"task {task_id} is claimed by {row['assignee']}, not by you ({actor}); "
                               "only the claim holder can do that — pick another card with claim_task")
        if token is None:
            raise InvalidInput(f"to {doing} task {task_id} pass token= the fencing token claim_task gave you "
                               "(call claim_task with this task_id again to get it back)")
        if token != row["fencing_token"]:
            raise StaleToken(f"token {token} for task {task_id} is stale (the current claim has token "
                             f"{row['fencing_token']}); your earlier claim ended, so this is refused")

    @contextmanager
    def _holding(self, actor: str, task_id: int, token: int, doing: str, running: bool = False):
        """A write transaction on a card the caller holds with its current token: yields (db, row, now)."""
        ts = now()
        with self.store.write() as db:
            self._sweep(db, ts)
            row = self.row(db, task_id)
            self._holder_check(row, actor, token, doing)
            if running and row["status"] != "in_progress":
                raise IllegalTransition(f"task {task_id} is {row['status']}; resume it with update_task "
                                        f"status='in_progress' before you {doing.split()[0]} it")
            yield db, row, ts

    # ----------------------------------------------------------------- commands

    def create(self, actor: str, new: NewTask) -> TaskSummary:
        """Add a card to todo."""
        task_type = new.task_type.strip().lower()
        if not new.title.strip():
            raise InvalidInput("title is blank: give the card a short imperative title")
        if not TASK_TYPE_RE.match(task_type):
            raise InvalidInput(f"task_type {new.task_type!r} is not valid: use a short lowercase word such as "
                               "code, test, refactor, docs, design or bug")
        self._check_text(new.description, self.limits.description, "description")
        labels = self._check_labels(new.labels)
        self._check_criteria(new.acceptance_criteria)
        tests = self._check_tests(new.acceptance_tests)
        waived = sorted({rule.strip().upper() for rule in new.waive})
        if len(waived) > self.limits.labels or not all(RULE_RE.match(rule) for rule in waived):
            raise InvalidInput(f"waive takes up to {self.limits.labels} analyser rule ids such as B324 or S608; got "
                               f"{', '.join(repr(r) for r in waived[:5])}")
        deps = list(dict.fromkeys(new.depends_on))
        if len(deps) > self.limits.depends_on:
            raise InvalidInput(f"{len(deps)} dependencies given; at most {self.limits.depends_on}")
        if not 1 <= new.attempts <= MAX_ATTEMPTS:
            raise InvalidInput(f"attempts must be 1 (one card) to {MAX_ATTEMPTS} (competing attempts, each its own "
                               f"card for a different agent); got {new.attempts}")
        if new.attempts > 1 and new.assignee:
            raise InvalidInput("competing attempts are for different agents: leave assignee out, or use attempts=1")
        assignee = self._registered(new.assignee, f"assignee {new.assignee!r} is not a registered agent") \
            if new.assignee else None
        # kept as why, decided now: no later edit of its labels takes it away (only an explicit clear, see update)
        approval = (self.approval_rule(task_type, labels) if self.approval_rule else None) or \
            (CREATOR_ASKED if new.needs_approval else None)
        ts = now()
        with self.store.write() as db:
            if deps:
                marks = ",".join("?" * len(deps))
                found = {r[0] for r in db.execute(f"SELECT id FROM tasks WHERE id IN ({marks})", deps)}
                missing = [d for d in deps if d not in found]
                if missing:
                    raise InvalidInput(f"depends_on names tasks that do not exist: {missing}")
            first = None
            for attempt in range(1, new.attempts + 1):
                title = new.title.strip() + (f" (attempt {attempt} of {new.attempts})" if new.attempts > 1 else "")
                task_id = db.execute(
                    "INSERT INTO tasks (title, description, task_type, priority, labels, acceptance_criteria, "
                    "acceptance_tests, waived, status, reserved_for, created_by, created_at, updated_at, contest, "
                    "approval) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'todo', ?, ?, ?, ?, ?, ?)",
                    [title, new.description, task_type, PRIORITY_RANK[new.priority], json.dumps(labels),
                     json.dumps(new.acceptance_criteria), tests, json.dumps(waived), assignee, actor, ts, ts,
                     first, approval]).lastrowid
                if new.attempts > 1 and first is None:
                    first = task_id
                    db.execute("UPDATE tasks SET contest = ? WHERE id = ?", [first, first])
                for dep in deps:
                    db.execute("INSERT INTO task_deps (task_id, depends_on) VALUES (?, ?)", [task_id, dep])
                self._history(db, task_id, actor, "created", None, "todo",
                              f"reserved for {assignee}" if assignee else
                              (f"attempt {attempt} of {new.attempts} of contest {first}" if first else None), ts)
                self.store.emit(TaskChanged(task_id, "todo"))
                if assignee and assignee != actor:
                    self.post_event(db, actor, "task_assignment", task_id, f"task {task_id} is yours: {title}",
                                    new.description, recipient=assignee)
            return self.summarize(db, self.row(db, first or task_id))

    def _registered(self, name: str | None, problem: str) -> str:
        """A registered agent's name, or InvalidInput: the problem and the agents that exist."""
        agent = self.agents.get(name, missing_ok=True) if name else None
        if agent is None:
            raise InvalidInput(f"{problem}; known agents: {', '.join(self.agents.names()) or 'none yet'}")
        return agent.name

    # ----------------------------------------------------------------- competing attempts

    def contest(self, contest_id: int) -> list[dict]:
        """The attempt cards of a contest, oldest first."""
        return list(self.store.db.query("SELECT * FROM tasks WHERE contest = ? ORDER BY id", [contest_id]))

    @staticmethod
    def _review_state(db: Database, row: dict) -> ReviewState:
        """Where the card's current work stands with its review: passed (its last round passed and moved it to
        done, or a person then approved it), awaiting a person's approval, or not passed (failed, never
        reviewed, or the card moved on since: a later claim has a new fencing token)."""
        last = db.execute("SELECT verdict, outcome, fencing_token FROM reviews WHERE task_id = ? AND status = "
                          "'finished' ORDER BY id DESC LIMIT 1", [row["id"]]).fetchone()
        if last is None or last[0] != "PASS" or last[2] != row["fencing_token"]:
            return "not passed"
        if row["status"] == "done":
            return "passed"
        return "awaiting approval" if row["status"] == "needs_human" and last[1] == "needs_human" else "not passed"

    def review_state(self, task_id: int) -> ReviewState:
        """Where one card's work stands with its review (see `_review_state`)."""
        with self.store.read() as db:
            return self._review_state(db, self.row(db, task_id))

    def decide_contest(self, contest_id: int, winner: int | None, result: str, ts: float | None = None) -> bool:
        """Record the referee's decision on every attempt and tell each attempt's people. The winner must be an
        attempt that passed its review; None: no attempt passed, and each waits for a person. No card moves:
        an attempt that did not pass stays with a person rather than reach done. False if the contest was
        decided already (another worker got there first), or is not over: an attempt is still being worked on
        or reviewed, or waits for a person's approval."""
        ts = now() if ts is None else ts
        with self.store.write() as db:
            attempts = list(db.query("SELECT * FROM tasks WHERE contest = ? ORDER BY id", [contest_id]))
            if not attempts or any(r["contest_result"] for r in attempts) or \
                    any(r["status"] not in ("done", "needs_human") for r in attempts):
                return False
            states = {r["id"]: self._review_state(db, r) for r in attempts}
            if "awaiting approval" in states.values():
                return False
            if winner is not None and states.get(winner) != "passed":
                raise IllegalTransition(f"task {winner} did not pass its review, so it cannot win contest "
                                        f"{contest_id}; name an attempt that passed, or none to leave every attempt "
                                        "to a person")
            for row in attempts:
                if winner is None:
                    verdict, head = "no winner", f"contest {contest_id}: no attempt passed review"
                else:
                    verdict = "won" if row["id"] == winner else f"lost to task {winner}"
                    head = f"contest {contest_id}: task {winner} won; task {row['id']} {verdict}"
                if row["status"] == "needs_human":
                    head += f"; task {row['id']} waits for a person (pass, send back or reassign)"
                self._change(db, row, "review", "contest decided", {"contest_result": f"{verdict}: {result}"},
                             f"contest {contest_id}: {verdict}", ts)
                self.post_event(db, "review", "contest.decided", row["id"], head, result)
            return True

    # ----------------------------------------------------------------- a person's decision

    def decide(self, actor: str, task_id: int, decision: str, note: str = "", assign_to: str | None = None
               ) -> TaskSummary:
        """A person (operator role) decides a card waiting in needs_human: `pass` it to done, `send_back`
        to its author (todo, reserved for them, the note as the brief), or `reassign` it to another agent.
        The author hears it in their inbox; the decision is logged as the human lens of the card's last
        review when that review sent it here (e.g. human approval required)."""
        if decision not in ("pass", "send_back", "reassign"):
            raise InvalidInput(f"decision {decision!r} is not one of pass, send_back, reassign")
        note = note.strip()
        self._check_text(note, self.limits.note, "note")
        if decision != "pass" and not note:
            raise InvalidInput(f"{decision.replace('_', ' ')} needs a note saying what to change or why")
        target = self._registered(assign_to, "reassign needs assign_to naming a registered agent") \
            if decision == "reassign" else None
        ts = now()
        with self.store.write() as db:
            row = self.row(db, task_id)
            if row["status"] != "needs_human":
                raise IllegalTransition(f"task {task_id} is {row['status']}, not needs_human: there is nothing to "
                                        "decide; reload the card")
            author = row["assignee"] or row["created_by"]
            reserve = author if decision == "send_back" else target
            head = {"pass": f"task {task_id} passed by {actor}",
                    "send_back": f"task {task_id} sent back to {author} by {actor}",
                    "reassign": f"task {task_id} reassigned to {target} by {actor}"}[decision]
            intent = {"pass": "approval", "send_back": "critique", "reassign": "status_update"}[decision]
            # first, while the author still holds the card: the thread (author, creator, subscribers) hears it
            self.post_event(db, actor, intent, task_id, head + (f": {note}" if note else ""), note)
            if decision == "pass":
                row = self.move(db, row, "done", "decide", actor, ts=ts, note=note or None)
            else:
                row = self.move(db, row, "todo", "decide", actor, ts=ts, reason=note, note=note,
                                sets={"reserved_for": reserve})
                if target and target != author:
                    self.post_event(db, actor, "task_assignment", task_id, f"task {task_id} is yours: {row['title']}",
                                    note, recipient=target)
            self.reviews.record_person(db, task_id, actor, "PASS" if decision == "pass" else "FAIL", head, note, ts)
            return self.summarize(db, row)

    def claim(self, actor: str, task_id: int | None = None, task_type: str | None = None) -> Claim:
        """Take a card: the given one, or the next ready one (highest priority, oldest first)."""
        ts = now()
        with self.store.write() as db:
            self._sweep(db, ts)
            if task_id is None:
                params: list = [actor]
                type_clause = ""
                if task_type:
                    type_clause, params = " AND t.task_type = ?", [actor, task_type.strip().lower()]
                found = db.execute(
                    f"SELECT id FROM tasks t WHERE t.status = 'todo' AND (t.reserved_for IS NULL OR t.reserved_for = ?)"
                    f"{type_clause} AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dt ON dt.id = d.depends_on "
                    f"WHERE d.task_id = t.id AND dt.status != 'done') AND (t.contest IS NULL OR NOT EXISTS (SELECT 1 "
                    f"FROM tasks o WHERE o.contest = t.contest AND o.assignee = ?)) ORDER BY t.priority DESC, t.id "
                    f"LIMIT 1", [*params, actor]).fetchone()
                if found is None:
                    what = f" of type {task_type!r}" if task_type else ""
                    return Claim(claimed=False, message=f"no ready card{what} in todo right now; create one, "
                                 "or call get_board to see what is blocked or waiting on dependencies")
                row = self.row(db, found[0])
            else:
                row = self.row(db, task_id)
                if row["status"] == "in_progress" and row["assignee"] == actor:
                    # Claiming what you already hold renews it and hands the token back (an agent that lost it).
                    return self._renew(db, row, actor, ts, "claimed again by its holder", "claim_task")
                if row["status"] == "in_progress":
                    raise NotYourClaim(f"task {task_id} is claimed by {row['assignee']} until "
                                       f"{iso(row['lease_expires_at'])}; call claim_task without task_id for the "
                                       "next ready card")
                if row["status"] != "todo":
                    raise IllegalTransition(f"task {task_id} is {row['status']}; only todo cards can be claimed")
            expires = ts + self.lease_seconds
            row = self.move(db, row, "in_progress", "claim_task", actor, ts=ts, note=f"lease until {iso(expires)}",
                            sets={"assignee": actor, "fencing_token": row["fencing_token"] + 1})
            self.post_event(db, actor, "task_claim", row["id"], f"{actor} claimed task {row['id']}: {row['title']}")
            return self._granted(db, row, expires)

    def _renew(self, db: Database, row: dict, actor: str, ts: float, note: str | None, via: Via) -> Claim:
        # the caller has established that the actor holds the card (by token, or by claiming it again)
        row = self.move(db, row, "in_progress", via, actor, token=row["fencing_token"], note=note, ts=ts)
        return self._granted(db, row, row["lease_expires_at"])

    def _granted(self, db: Database, row: dict, expires: float) -> Claim:
        """The answer to the claim holder: its card, token and lease."""
        return Claim(claimed=True, message=f"task {row['id']} is yours until {iso(expires)}",
                     task=self._task(db, row, history=0, viewer=row["assignee"]), token=row["fencing_token"],
                     lease_expires_at=iso(expires), lease_seconds=self.lease_seconds)

    def renew(self, actor: str, task_id: int, token: int) -> Claim:
        """Extend the holder's lease by the lease length from now."""
        with self._holding(actor, task_id, token, "renew the claim on", running=True) as (db, row, ts):
            return self._renew(db, row, actor, ts, None, "update_task")

    def release(self, actor: str, task_id: int, token: int, reason: str | None = None) -> TaskSummary:
        """Give a claimed card back to todo."""
        self._check_text(reason, self.limits.note, "reason")
        with self._holding(actor, task_id, token, "release") as (db, row, ts):
            self.post_event(db, actor, "status_update", task_id, f"{actor} released task {task_id} back to todo"
                            + (f": {reason}" if reason else ""))
            row = self.move(db, row, "todo", "release_task", actor, token=token, note=reason, ts=ts)
            return self.summarize(db, row)

    def update(self, actor: str, task_id: int, *, token: int | None = None, note: str | None = None,
               status: str | None = None, reason: str | None = None, edit: TaskEdit | None = None,
               expected_version: int | None = None) -> TaskSummary:
        """Progress notes, status changes (blocked, resume, unblock, needs_human) and field edits.

        The card's brief (title, description, labels, acceptance criteria, needs_approval) is changed only by
        its creator or an operator, and its acceptance criteria only until it is first claimed; a note or a
        priority on a claimed card is its holder's."""
        self._check_text(note, self.limits.note, "note")
        self._check_text(reason, self.limits.note, "reason")
        edit = edit or TaskEdit()
        changes: dict = {}
        if edit.title is not None:
            if not edit.title.strip() or len(edit.title) > 200:
                raise InvalidInput("title must be 1-200 characters")
            changes["title"] = edit.title.strip()
        if edit.description is not None:
            self._check_text(edit.description, self.limits.description, "description")
            changes["description"] = edit.description
        if edit.priority is not None:
            changes["priority"] = PRIORITY_RANK[edit.priority]
        if edit.labels is not None:
            changes["labels"] = json.dumps(self._check_labels(edit.labels))
        if edit.acceptance_criteria is not None:
            self._check_criteria(edit.acceptance_criteria)
            changes["acceptance_criteria"] = json.dumps(edit.acceptance_criteria)
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if reason and not status:
            raise InvalidInput("reason= goes with status= (blocked, needs_human); for a progress note use note=")
        if not (changes or note or status or edit.needs_approval is not None):
            if token is not None:  # the holder checking in: extend the lease
                self.renew(actor, task_id, token)
                return self.summary(task_id)
            raise InvalidInput("nothing to update: pass a note, a status or a field to change (or, on a card you "
                               "hold, your token alone to extend your lease)")
        ts = now()
        with self.store.write() as db:
            self._sweep(db, ts)
            row = self.row(db, task_id)
            if expected_version is not None and expected_version != row["version"]:
                raise Conflict(f"task {task_id} changed since version {expected_version} (it is now version "
                               f"{row['version']}); call get_task, re-apply your change and retry")
            held = row["assignee"] is not None and row["status"] in ("in_progress", "blocked")
            stuck_review = row["status"] == "review" and status == "needs_human" and not (
                changes or note or edit.needs_approval is not None)
            if row["status"] in ("done", "review") and not stuck_review:
                raise IllegalTransition(f"task {task_id} is {row['status']} and cannot be updated"
                                        + ("; create a follow-up task instead" if row["status"] == "done" else
                                           "; wait for its review to finish (get_review), or, if the review is "
                                           "stuck, ask a person (role human or lead) to move it to needs_human"))
            moving = status is not None and status != row["status"]
            if moving and transitions.find(row["status"], status, "update_task") is None:
                raise IllegalTransition(_illegal(row, status, "update_task")
                                        + " (use claim_task / release_task / complete_task for the rest)")
            brief = [name for name in ("title", "description", "labels", "acceptance_criteria", "needs_approval")
                     if getattr(edit, name) is not None]
            if brief:  # what the card asks for is its creator's: a holder rewriting it would grade its own work
                if actor != row["created_by"] and not self._operator(actor):
                    raise Forbidden(f"only task {task_id}'s creator ({row['created_by']}) or an agent with the role "
                                    f"{' or '.join(OPERATOR_ROLES)} may change its {', '.join(brief)}; send a note "
                                    "instead, or ask them with publish_message")
                if edit.acceptance_criteria is not None and row["fencing_token"] > 0:
                    raise IllegalTransition(f"task {task_id}'s acceptance criteria are frozen since it was first "
                                            "claimed; create a new card with create_task for other criteria")
                approval = self._approval_after(row, actor, edit.needs_approval, changes.get("labels"))
                if approval != row["approval"]:
                    changes["approval"] = approval
            # A note or a priority on a claimed card is the holder's business, and so is anything sent with a
            # token (the caller believes it holds the card).
            if token is not None or (not moving and held and (note or edit.priority is not None)):
                self._holder_check(row, actor, token, "update")
            text = "; ".join(x for x in (reason, note, ("changed " + ", ".join(changes)) if changes else None) if x)
            if moving:  # posted before the change, so a holder losing the card is still told
                self.post_event(db, actor, "status_update", task_id,
                                f"task {task_id} {row['status']} → {status}" + (f": {reason}" if reason else ""))
                row = self.move(db, row, status, "update_task", actor, token=token, reason=reason, sets=changes,
                                note=text or None, ts=ts)
            else:
                if row["status"] == "in_progress" and held and actor == row["assignee"]:
                    changes["lease_expires_at"] = ts + self.lease_seconds  # activity renews the lease
                row = self._change(db, row, actor, "edited" if changes.keys() - {"lease_expires_at"} else "progress",
                                   changes, text or None, ts)
            return self.summarize(db, row)

    def _approval_after(self, row: dict, actor: str, asked: bool | None, labels: str | None) -> str | None:
        """Why the card needs a person's approval after an edit by its creator or an operator: a label that asks
        for it adds it, taking a label away never removes it, and only `asked=False` clears it (what its creator
        alone asked for, by its creator; anything else only by an operator; never while the card's type or
        labels still match the review configuration)."""
        by_rule = self.approval_rule(row["task_type"], json.loads(labels or row["labels"])) \
            if self.approval_rule else None
        if asked is None:
            return row["approval"] or by_rule
        if asked:
            return row["approval"] or by_rule or (CREATOR_ASKED if actor == row["created_by"] else f"asked by {actor}")
        if by_rule:
            raise InvalidInput(f"task {row['id']}'s {by_rule} needs a person's approval under the review "
                               "configuration, so needs_approval cannot be cleared"
                               + ("; remove that label in the same call" if by_rule.startswith("label") else ""))
        if row["approval"] not in (None, CREATOR_ASKED) and not self._operator(actor):
            raise Forbidden(f"task {row['id']} needs a person's approval ({row['approval']}), which only an agent "
                            f"with the role {' or '.join(OPERATOR_ROLES)} may clear; ask the operator")
        return None

    def complete(self, actor: str, task_id: int, token: int, output: str, summary: str | None = None,
                 artifacts: list[Artifact] | None = None, to_status: str | Callable[[TaskSummary], str] = "done",
                 helpful: list[int] | None = None) -> TaskSummary:
        """Record the holder's output and artifacts and move the card to review (or done).

        `to_status` is "review" or "done", or a function of the held card that says which (decided inside
        the transaction, so deciding costs no read of its own)."""
        if not callable(to_status) and to_status not in ("review", "done", "needs_human"):
            raise ValueError("to_status must be review, done or needs_human")
        artifacts = artifacts or []
        self._check_text(output, self.limits.output, "output")
        self._check_text(summary, self.limits.summary, "summary")
        if len(artifacts) > self.limits.artifacts:
            raise InvalidInput(f"{len(artifacts)} artifacts given; at most {self.limits.artifacts}")
        for a in artifacts:
            self._check_text(a.content, self.limits.artifact_chars, f"artifact {a.name!r}")
        if not output.strip() and not artifacts:
            raise InvalidInput("complete_task needs output= describing what was done (or at least one artifact)")
        with self._holding(actor, task_id, token, "complete", running=True) as (db, row, ts):
            if callable(to_status):
                to_status = to_status(self.summarize(db, row))
                if to_status not in ("review", "done", "needs_human"):
                    raise ValueError("to_status must be review, done or needs_human")
            # the artifacts first: a card that goes straight to done takes them into the shared memory
            db.execute("DELETE FROM artifacts WHERE task_id = ? AND fencing_token = ?", [task_id, token])
            for a in artifacts:
                db.execute("INSERT INTO artifacts (task_id, fencing_token, name, kind, content, created_at) "
                           "VALUES (?, ?, ?, ?, ?, ?)", [task_id, token, a.name, a.kind, a.content, ts])
            moved = self.move(db, row, to_status, "complete_task", actor, token=token, note=summary, ts=ts,
                              sets={"output": output, "summary": summary},
                              reason=f"awaiting a person's approval ({row['approval']}); no review ran"
                              if to_status == "needs_human" else None)
            if helpful:
                self.knowledge.mark_useful(db, actor, task_id, helpful)
            if to_status == "review":  # the durable job commits with the card's move, or neither does
                self.reviews.enqueue(db, row, output, summary, artifacts, ts)
            self.post_event(db, actor, "output.complete", task_id,
                        f"task {task_id} complete ({to_status}): {summary or output.strip()[:200]}", output)
            return self.summarize(db, moved)  # nothing after the move changes the card's row
