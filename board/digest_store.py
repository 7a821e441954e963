"""Digests per task type in SQLite: a task type's lessons grouped into a few rules with counts.

memory/digests.py decides when a digest is due and writes it; this module only stores and reads it,
counts the lessons behind it, and leases a rebuild to one process at a time (a model-written digest
costs a model call: two servers of one data directory must not both pay it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, Field

from . import scopes
from .db import Store, iso, now


class DigestRule(BaseModel):
    rule: str = Field(description="what to do, in one sentence")
    problem: str = Field("", description="the problem it answers, as one of its lessons put it")
    count: int = Field(
        description="distinct authors behind this rule's lessons (the review's own lessons: distinct cards); copies "
        "one author recorded count once"
    )
    lessons: list[int] = Field(description="ids of those lessons, the quoted one first")


class Digest(BaseModel):
    task_type: str
    title: str
    rules: list[DigestRule] = Field(description="most frequent first")
    lessons: int = Field(description="live lessons of this task type the digest was made from")
    written_by: str = Field(description="'extractive' (grouped by meaning offline) or 'llm:<model>'")
    version: int
    updated_at: str


@dataclass
class Lesson:
    """A live lesson as a digest sees it: its text and its weight."""

    id: int
    title: str
    text: str
    count: int


class Digests:
    def __init__(self, store: Store):
        self.store = store

    def get(self, task_type: str) -> Digest | None:
        """The digest of a task type, or None when none has been written yet."""
        row = self.store.db.execute(OF_TYPE.format("?"), [task_type]).fetchone()
        return None if row is None else _digest(row)

    def all(self) -> list[Digest]:
        return [
            _digest(r)
            for r in self.store.db.execute(
                "SELECT task_type, title, rules, lessons, written_by, version, updated_at FROM memory_digests "
                "WHERE version > 0 ORDER BY task_type"
            )
        ]

    def accrued(self) -> dict[str, int]:
        """Witnesses of reviewed lessons per task type (distinct authors, or cards for the review's own lessons),
        superseded ones too: a number that only grows, so a digest knows how many came in since it was written.
        Only reviewed lessons make a digest: it is handed at every claim without being asked for."""
        return {
            r[0]: r[1]
            for r in self.store.db.execute(
                "SELECT task_type, sum(witnesses) FROM memory_items WHERE kind = 'lesson' AND task_type IS NOT NULL "
                "AND trust = 'reviewed' AND held IS NULL GROUP BY task_type"
            )
        }

    def built(self) -> dict[str, int]:
        """`accrued` of each task type when its digest was last written."""
        return {
            r[0]: r[1] for r in self.store.db.execute("SELECT task_type, accrued FROM memory_digests WHERE version > 0")
        }

    def lessons(self, task_type: str, limit: int) -> list[Lesson]:
        """The newest `limit` live reviewed lessons of a task type, each weighed by its witnesses."""
        return [
            Lesson(id=r[0], title=r[1], text=r[2], count=r[3])
            for r in self.store.db.execute(
                "SELECT id, title, text, witnesses FROM memory_items WHERE kind = 'lesson' AND task_type = ? "
                "AND deprecated = 0 AND trust = 'reviewed' AND held IS NULL ORDER BY id DESC LIMIT ?",
                [task_type, limit],
            )
        ]

    def claim(self, task_type: str, seconds: float) -> bool:
        """Lease the rebuild of a task type's digest to this caller; False while another holds it."""
        ts = now()
        with self.store.write(scopes.digest(task_type)) as db:
            return (
                db.execute(
                    "INSERT INTO memory_digests (task_type, building_until) VALUES (?, ?) ON CONFLICT (task_type) "
                    "DO UPDATE SET building_until = excluded.building_until WHERE memory_digests.building_until IS NULL "
                    "OR memory_digests.building_until < ? RETURNING task_type",
                    [task_type, ts + seconds, ts],
                ).fetchone()
                is not None
            )

    def release(self, task_type: str) -> None:
        with self.store.write(scopes.digest(task_type)) as db:
            db.execute("UPDATE memory_digests SET building_until = NULL WHERE task_type = ?", [task_type])

    def save(
        self, task_type: str, title: str, rules: list[DigestRule], lessons: int, accrued: int, written_by: str
    ) -> Digest:
        """Store a new version of a task type's digest (and end the rebuild's lease)."""
        with self.store.write(scopes.digest(task_type)) as db:
            db.execute(
                "INSERT INTO memory_digests (task_type) VALUES (?) ON CONFLICT (task_type) DO NOTHING", [task_type]
            )
            db.execute(
                "UPDATE memory_digests SET title = ?, rules = ?, lessons = ?, accrued = ?, written_by = ?, "
                "version = version + 1, updated_at = ?, building_until = NULL WHERE task_type = ?",
                [title, json.dumps([r.model_dump() for r in rules]), lessons, accrued, written_by, now(), task_type],
            )
        return self.get(task_type)


# a task type's digest, once one was written ({}: the task type, a placeholder or a subquery)
OF_TYPE = (
    "SELECT task_type, title, rules, lessons, written_by, version, updated_at FROM memory_digests "
    "WHERE task_type = ({}) AND version > 0"
)


def of_rows(found: list[dict]) -> Digest | None:
    """The digest OF_TYPE read (rows as dicts), or None."""
    return _digest(list(found[0].values())) if found else None


def _digest(row) -> Digest:
    return Digest(
        task_type=row[0],
        title=row[1],
        rules=[DigestRule(**r) for r in json.loads(row[2])],
        lessons=row[3],
        written_by=row[4],
        version=row[5],
        updated_at=iso(row[6]),
    )
