"""What people see on the web board: read models over the board's tables, one query per view.

The MCP tools answer agents with compact cards; a person watching the board wants more on each card
(lease left, review round and score, dependencies) and views no tool has (who holds what, per-agent
pass rates, a card's lessons). They are read here, next to the SQL, so the web layer only renders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pydantic import BaseModel

from . import cards
from .db import Store, iso, now, placeholders
from .dialect import Dialect
from .errors import InvalidInput
from .messages import POOL_VISIBLE
from .models import RANK_PRIORITY, STATUSES, AcceptanceTests

COLUMN_LIMIT = 200


class CardView(BaseModel):
    """A card as a column shows it."""

    id: int
    title: str
    status: str
    task_type: str
    priority: str
    rank: int  # the column order: higher priority first, then older
    labels: list[str]
    assignee: str | None
    reserved_for: str | None
    created_by: str
    lease_expires_at: float | None
    blocked_reason: str | None
    unverified: bool
    review_round: int | None
    review_status: str | None
    score: float | None
    depends_on: list[tuple[int, str]]
    updated_at: float


class ColumnPage(BaseModel):
    status: str
    count: int
    cards: list[CardView]
    next_after: str | None  # pass back as `after` for the next page


class AgentView(BaseModel):
    name: str
    role: str | None
    last_seen: str | None
    last_seen_at: float | None
    waiting: bool
    waiting_until: float | None = None  # while it waits for messages (get_messages with a wait)
    holding: list[tuple[int, str]]
    first_rounds: int
    first_passes: int
    client_session: str | None = None  # the client session (Claude Code's) the agent is, when one registered it

    @property
    def first_pass_rate(self) -> float | None:
        return round(self.first_passes / self.first_rounds, 3) if self.first_rounds else None


class LessonLink(BaseModel):
    id: int
    title: str
    text: str
    kind: str
    task_id: int | None
    useful: bool = False


def _card_sql(sql: Dialect) -> str:
    return f"""
SELECT t.id, t.title, t.status, t.task_type, t.priority, t.labels, t.assignee, t.reserved_for, t.created_by,
       t.lease_expires_at, t.blocked_reason, t.unverified, t.updated_at,
       r.round, r.status, {sql.json_number("r.synthesis", "score")}
FROM tasks t LEFT JOIN reviews r ON r.id = (SELECT max(id) FROM reviews WHERE task_id = t.id)
"""


def _filters(sql: Dialect, task_type: str | None, agent: str | None, label: str | None) -> tuple[list[str], list]:
    where, params = [], []
    if task_type:
        where.append("t.task_type = ?"), params.append(task_type.strip().lower())
    if agent:  # the agent's cards: held, reserved for it, or created by it
        where.append("(t.assignee = ? OR t.reserved_for = ? OR t.created_by = ?)")
        params += [agent.strip().lower()] * 3
    if label:
        where.append(sql.json_has("t.labels")), params.append(label)
    return where, params


def _order(status: str) -> tuple[str, str]:
    """(ORDER BY, the keyset column) of a column: done newest first, the rest in claim order."""
    if status == "done":
        return "t.updated_at DESC, t.id DESC", "updated"
    return "t.priority DESC, t.id", "priority"


class Views:
    def __init__(self, store: Store):
        self.store = store

    def column(
        self,
        status: str,
        *,
        task_type: str | None = None,
        agent: str | None = None,
        label: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> ColumnPage:
        """One column's cards matching the filters, a bounded page at a time (`after`: the previous
        page's next_after)."""
        if status not in STATUSES:
            raise InvalidInput(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if not 1 <= limit <= COLUMN_LIMIT:
            raise InvalidInput(f"limit must be between 1 and {COLUMN_LIMIT}")
        where, params = _filters(self.store.dialect, task_type, agent, label)
        where.insert(0, "t.status = ?"), params.insert(0, status)
        order, _ = _order(status)
        page_where, page_params = list(where), list(params)
        if after:
            try:
                first, last_id = after.split(":")
                key, last_id = float(first), int(last_id)
            except ValueError:
                raise InvalidInput("after is not valid: pass next_after from the previous page unchanged") from None
            if status == "done":
                page_where.append("(t.updated_at < ? OR (t.updated_at = ? AND t.id < ?))")
            else:
                page_where.append("(t.priority < ? OR (t.priority = ? AND t.id > ?))")
            page_params += [key, key, last_id]
        with self.store.read() as db:
            count = db.execute(f"SELECT count(*) FROM tasks t WHERE {' AND '.join(where)}", params).fetchone()[0]
            rows = db.execute(
                f"{_card_sql(self.store.dialect)} WHERE {' AND '.join(page_where)} ORDER BY {order} LIMIT ?",
                [*page_params, limit + 1],
            ).fetchall()
            more = len(rows) > limit
            cards = self._cards(db, rows[:limit])
        next_after = None
        if more and cards:
            last = cards[-1]
            next_after = f"{last.updated_at!r}:{last.id}" if status == "done" else f"{last.rank}:{last.id}"
        return ColumnPage(status=status, count=count, cards=cards, next_after=next_after)

    def last_event(self) -> int:
        """The id of the newest commit event: a page rendered after reading it shows every change up to it,
        so a live page that learns of a newer one knows it may have missed something."""
        return self.store.db.execute("SELECT coalesce(max(id), 0) FROM events").fetchone()[0]

    def cards(self, ids: Iterable[int]) -> list[CardView]:
        """These cards (the ones that still exist), for a live update."""
        ids = sorted(set(ids))
        found: list[CardView] = []
        with self.store.read() as db:
            for n in range(0, len(ids), 500):  # SQLite's bound on variables, in slices
                part = ids[n : n + 500]
                rows = db.execute(
                    f"{_card_sql(self.store.dialect)} WHERE t.id IN ({placeholders(part)})", part
                ).fetchall()
                found += self._cards(db, rows)
        return found

    def pool_tasks(self, message_ids: Iterable[int]) -> tuple[bool, set[int]]:
        """Of these messages, whether any is in the shared pool, and the cards whose threads they are in
        (direct messages count for neither: a page never shows them)."""
        ids = sorted(set(message_ids))
        shared, tasks = False, set()
        with self.store.read() as db:
            for n in range(0, len(ids), 500):
                part = ids[n : n + 500]
                for (task_id,) in db.execute(
                    f"SELECT m.task_id FROM messages m WHERE m.id IN ({placeholders(part)}) AND {POOL_VISIBLE}",
                    part,
                ):
                    shared = True
                    if task_id is not None:
                        tasks.add(task_id)
        return shared, tasks

    def counts(
        self, *, task_type: str | None = None, agent: str | None = None, label: str | None = None
    ) -> dict[str, int]:
        where, params = _filters(self.store.dialect, task_type, agent, label)
        only = f"WHERE {' AND '.join(where)} " if where else ""  # PostgreSQL takes no `WHERE 1`: no filter, no WHERE
        with self.store.read() as db:
            found = dict(
                db.execute(f"SELECT t.status, count(*) FROM tasks t {only}GROUP BY t.status", params).fetchall()
            )
        return {status: found.get(status, 0) for status in STATUSES}

    def choices(self) -> tuple[list[str], list[str], list[str]]:
        """The task types, agents and labels the filters can offer."""
        with self.store.read() as db:
            types = [r[0] for r in db.execute("SELECT DISTINCT task_type FROM tasks ORDER BY 1 LIMIT 200")]
            agents = [r[0] for r in db.execute("SELECT name FROM agents ORDER BY 1 LIMIT 500")]
            labels = [
                r[0]
                for r in db.execute(
                    f"SELECT DISTINCT l.value FROM tasks, {self.store.dialect.json_texts('tasks.labels', 'l')} "
                    "ORDER BY 1 LIMIT 200"
                )
            ]
        return types, agents, labels

    def _cards(self, db, rows) -> list[CardView]:
        ids = [r[0] for r in rows]
        deps: dict[int, list[tuple[int, str]]] = {i: [] for i in ids}
        if ids:
            for task_id, dep, dep_status in db.execute(
                f"SELECT d.task_id, d.depends_on, t.status FROM task_deps d JOIN tasks t ON t.id = d.depends_on "
                f"WHERE d.task_id IN ({placeholders(ids)}) ORDER BY d.depends_on",
                ids,
            ):
                deps[task_id].append((dep, dep_status))
        return [
            CardView(
                id=r[0],
                title=r[1],
                status=r[2],
                task_type=r[3],
                priority=RANK_PRIORITY[r[4]],
                rank=r[4],
                labels=json.loads(r[5] or "[]"),
                assignee=r[6],
                reserved_for=r[7],
                created_by=r[8],
                lease_expires_at=r[9],
                blocked_reason=r[10],
                unverified=bool(r[11]),
                updated_at=r[12],
                review_round=r[13],
                review_status=r[14],
                score=round(r[15], 1) if r[15] is not None else None,
                depends_on=deps[r[0]],
            )
            for r in rows
        ]

    # ----------------------------------------------------------------- agents

    def agents(self) -> list[AgentView]:
        """Every agent: role, presence, the cards it holds, its first-round review record."""
        ts = now()
        with self.store.read() as db:
            holding: dict[str, list[tuple[int, str]]] = {}
            for task_id, title, who in db.execute(
                "SELECT id, title, assignee FROM tasks WHERE assignee IS NOT NULL "
                "AND status IN ('in_progress', 'review', 'blocked', "
                "'needs_human') ORDER BY id"
            ):
                holding.setdefault(who, []).append((task_id, title))
            firsts = {
                name: (n, p)
                for name, n, p in db.execute(
                    "SELECT agent, count(*), count(*) FILTER (WHERE verdict = 'PASS') FROM reviews WHERE round = 1 AND status = 'finished' "
                    "GROUP BY agent"
                )
            }
            rows = db.execute(
                "SELECT name, role, last_seen_at, waiting_until, client_session FROM agents ORDER BY "
                "coalesce(last_seen_at, 0) DESC, name LIMIT 1000"
            ).fetchall()
        return [
            AgentView(
                name=name,
                role=role,
                last_seen=iso(seen) if seen else None,
                last_seen_at=seen,
                waiting=bool(waiting and waiting >= ts),
                waiting_until=waiting if waiting and waiting >= ts else None,
                holding=holding.get(name, []),
                first_rounds=firsts.get(name, (0, 0))[0],
                first_passes=firsts.get(name, (0, 0))[1] or 0,
                client_session=session,
            )
            for name, role, seen, waiting, session in rows
        ]

    # ----------------------------------------------------------------- a card's lessons

    def lessons(self, task_id: int) -> tuple[list[LessonLink], list[LessonLink]]:
        """(lessons this card's reviews produced, memory items handed to its agents at claim)."""
        with self.store.read() as db:
            produced = [
                LessonLink(id=r[0], title=r[1], text=r[2], kind=r[3], task_id=r[4])
                for r in db.execute(
                    "SELECT id, title, text, kind, task_id FROM memory_items WHERE task_id = ? AND kind = 'lesson' "
                    "ORDER BY id LIMIT 50",
                    [task_id],
                )
            ]
            handed = [
                LessonLink(id=r[0], title=r[1], text=r[2], kind=r[3], task_id=r[4], useful=bool(r[5]))
                for r in db.execute(
                    "SELECT m.id, m.title, m.text, m.kind, m.task_id, count(s.useful_at) FROM memory_surfaced s "
                    "JOIN memory_items m ON m.id = s.item_id WHERE s.task_id = ? GROUP BY m.id ORDER BY min(s.id) LIMIT 50",
                    [task_id],
                )
            ]
        return produced, handed

    def acceptance_tests(self, task_id: int) -> AcceptanceTests | None:
        """A card's acceptance tests whole, hidden ones included: agents see only that hidden tests exist
        (board/cards.py), a person logged in to the web board reads them."""
        return cards.acceptance_tests(cards.row(self.store.db, task_id))

    def round_counts(self) -> dict[int, int]:
        """How many cards ended their review after 1, 2, 3… rounds."""
        with self.store.read() as db:
            return dict(
                db.execute(
                    "SELECT round, count(*) FROM reviews WHERE status = 'finished' AND outcome IN "
                    "('done', 'needs_human') GROUP BY round ORDER BY round LIMIT 50"
                ).fetchall()
            )
