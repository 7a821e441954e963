"""What `hiveboard hook` (server/hook.py) reads and writes, with nothing but the database driver.

A Claude Code hook runs as a new process on every prompt, tool call and stop, so it must start in well under
150 ms: this module imports only the standard library (and psycopg for a `postgresql://` board), not the board's
models, sqlite-utils or the store. Its statements are plain SQL both databases speak; a connection is opened per
hook run and closed at its end. It reads cards, the inbox and lessons, and writes only `token_usage` rows.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from . import scopes
from .optional import POSTGRES, need

VERDICT_INTENTS = ("approval", "critique", "needs_human")  # a review's verdict reaching the card's author
HELD = ("in_progress", "blocked", "needs_human", "review")
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens")
# tokens in one usage row, at most: a row is a stretch of one session (between two of its Stop hooks) on one card and
# model, which even with a full context re-read at every step is tens of millions, not a billion
TOKENS_MAX = 100_000_000


class UsageRefused(Exception):
    """Usage the board does not record, in one sentence; `status`: what the hook endpoint answers with (HTTP)."""

    def __init__(self, status: int, sentence: str):
        super().__init__(sentence)
        self.status = status


class View:
    """One connection to the board's database (SQLite file or PostgreSQL URL)."""

    def __init__(self, target: str, timeout: float = 2.0):
        self.postgres = target.startswith(("postgresql://", "postgres://"))
        if self.postgres:
            psycopg = need("psycopg", POSTGRES)
            self.conn = psycopg.connect(target, autocommit=True, connect_timeout=max(1, int(timeout)))
        else:
            if not Path(target).is_file():
                raise FileNotFoundError(f"no board at {target}")
            self.conn = sqlite3.connect(target, timeout=timeout, isolation_level=None)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, params: list | tuple = ()) -> list[dict]:
        if self.postgres:
            sql = sql.replace("?", "%s")
        cursor = self.conn.execute(sql, tuple(params))
        keys = [d[0] for d in cursor.description]
        return [dict(zip(keys, row)) for row in cursor.fetchall()]

    def execute(self, sql: str, params: list | tuple = ()) -> None:
        self.conn.execute(sql.replace("?", "%s") if self.postgres else sql, tuple(params))

    # ------------------------------------------------------------------ reads

    def agent_exists(self, agent: str) -> bool:
        return bool(self.rows("SELECT 1 AS one FROM agents WHERE name = ?", [agent]))

    def cards(self, agent: str) -> list[dict]:
        """The agent's cards: those it holds (claimed, blocked, waiting for a person or a review) and those
        reserved for it in todo; in progress first."""
        marks = ", ".join("?" * len(HELD))
        return self.rows(
            "SELECT id, title, status, task_type, lease_expires_at FROM tasks WHERE "
            f"(assignee = ? AND status IN ({marks})) OR (reserved_for = ? AND status = 'todo') "
            "ORDER BY CASE status WHEN 'in_progress' THEN 0 ELSE 1 END, priority DESC, id LIMIT 20",
            [agent, *HELD, agent],
        )

    def mail_after(self, agent: str, after: int, limit: int = 10) -> list[dict]:
        """The agent's direct messages and the verdicts on its cards newer than message `after`, oldest first."""
        marks = ", ".join("?" * len(VERDICT_INTENTS))
        return self.rows(
            "SELECT m.id, m.sender, m.intent, m.task_id, m.summary, m.recipient FROM inbox i JOIN messages m ON "
            f"m.id = i.message_id WHERE i.agent = ? AND m.id > ? AND (m.recipient = ? OR m.intent IN ({marks})) "
            "ORDER BY m.id LIMIT ?",
            [agent, after, agent, *VERDICT_INTENTS, limit],
        )

    def newest_message(self) -> int:
        return self.rows("SELECT coalesce(max(id), 0) AS n FROM messages")[0]["n"]

    def unread_direct(self, agent: str) -> int:
        return self.rows(
            "SELECT count(*) AS n FROM inbox i JOIN messages m ON m.id = i.message_id "
            "WHERE i.agent = ? AND i.read_at IS NULL AND m.recipient = ?",
            [agent, agent],
        )[0]["n"]

    def top_lesson(self, task_type: str) -> dict | None:
        """The reviewed lesson of this task type the most distinct authors (or cards) stand behind, newest among
        equals; an unreviewed one is never pushed into a session."""
        found = self.rows(
            "SELECT id, title, text, created_by, task_id, review_id FROM memory_items WHERE kind = 'lesson' "
            "AND task_type = ? AND deprecated = 0 AND superseded_by IS NULL AND trust = 'reviewed' AND held IS NULL "
            "ORDER BY witnesses DESC, created_at DESC LIMIT 1",
            [task_type],
        )
        return found[0] if found else None

    def last_failed(self, task_ids: list[int]) -> set[int]:
        """Of these cards, those whose latest review round ended in FAIL (the card came back to its holder)."""
        if not task_ids:
            return set()
        marks = ", ".join("?" * len(task_ids))
        latest = self.rows(
            f"SELECT task_id, note FROM task_history WHERE id IN (SELECT max(id) FROM task_history WHERE task_id IN "
            f"({marks}) AND actor = 'review' GROUP BY task_id)",
            task_ids,
        )
        return {r["task_id"] for r in latest if (r["note"] or "").startswith("FAIL")}

    def ready(self, agent: str) -> int:
        """Cards in todo this agent may claim now (not reserved for another, dependencies done)."""
        return self.rows(
            "SELECT count(*) AS n FROM tasks t WHERE t.status = 'todo' AND (t.reserved_for IS NULL OR "
            "t.reserved_for = ?) AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks dt ON dt.id = d.depends_on "
            "WHERE d.task_id = t.id AND dt.status != 'done')",
            [agent],
        )[0]["n"]

    def holdings(self, agent: str, since: float) -> list[tuple[float, float, int]]:
        """(from, until, card) for each stretch since `since` in which the agent held a card, from the cards'
        history: a claim by the agent starts one, the next move of that card out of in_progress ends it."""
        moves = self.rows(
            "SELECT h.task_id, h.at, h.actor, h.to_status, h.from_status FROM task_history h WHERE h.task_id IN "
            "(SELECT DISTINCT task_id FROM task_history WHERE actor = ? AND to_status = 'in_progress' AND at >= ?) "
            "ORDER BY h.id",
            [agent, since - 86_400],
        )
        open_: dict[int, float] = {}
        out: list[tuple[float, float, int]] = []
        for m in moves:
            card = m["task_id"]
            if m["to_status"] == "in_progress" and m["from_status"] != "in_progress" and m["actor"] == agent:
                open_[card] = m["at"]
            elif card in open_ and m["from_status"] == "in_progress" and m["to_status"] != "in_progress":
                out.append((open_.pop(card), m["at"], card))
        out += [(start, float("inf"), card) for card, start in open_.items()]
        return out

    def claimed(self, agent: str, task_ids: list[int]) -> set[int]:
        """Of these cards, those the agent has claimed at some time (what usage may be recorded against)."""
        if not task_ids:
            return set()
        marks = ", ".join("?" * len(task_ids))
        found = self.rows(
            f"SELECT DISTINCT task_id FROM task_history WHERE actor = ? AND to_status = 'in_progress' AND task_id IN "
            f"({marks})",
            [agent, *task_ids],
        )
        return {r["task_id"] for r in found}

    def last_held(self, agent: str, task_ids: list[int]) -> set[int]:
        """Of these cards, those whose latest claim was the agent's (it holds the card, or held it last); the board's
        own moves back to in_progress (a review's FAIL) keep the holder."""
        if not task_ids:
            return set()
        marks = ", ".join("?" * len(task_ids))
        found = self.rows(
            f"SELECT h.task_id, h.actor FROM task_history h WHERE h.id IN (SELECT max(id) FROM task_history WHERE "
            f"task_id IN ({marks}) AND to_status = 'in_progress' AND actor NOT IN ('review', 'system') "
            "GROUP BY task_id)",
            task_ids,
        )
        return {r["task_id"] for r in found if r["actor"] == agent}

    def usage_rows(self, agent: str, since: float) -> int:
        """Token-usage rows the agent recorded since `since`."""
        return self.rows("SELECT count(*) AS n FROM token_usage WHERE agent = ? AND recorded_at >= ?", [agent, since])[
            0
        ]["n"]

    # ------------------------------------------------------------------ writes

    def record_usage(self, agent: str, session_id: str, rows: list[dict], per_hour: int = 0) -> list[int]:
        """Token usage of a stretch of a session (one row per card and model), recorded for `agent` in one write
        transaction holding the agent's scope (board/scopes.py), or refused whole (UsageRefused, nothing written): a row of more
        than TOKENS_MAX tokens, a card the agent never claimed or that another agent claimed after it (usage goes
        only to the card it held when the tokens were spent: it holds it, or held it last), or past `per_hour` rows
        in the last hour (0: no cap). The cards named. Every path records through here: the local hook and the
        server's hook endpoint."""
        big = next((r for r in rows if sum(r[k] for k in TOKEN_FIELDS) > TOKENS_MAX), None)
        if big is not None:
            raise UsageRefused(
                400,
                f"a usage row of {sum(big[k] for k in TOKEN_FIELDS):,} tokens is more than a stretch of one session "
                f"spends (at most {TOKENS_MAX:,} a row); nothing was recorded: send the session's usage as the "
                "transcript gives it",
            )
        cards = sorted({r["task_id"] for r in rows if r["task_id"] is not None})
        ts = time.time()
        self._begin_write(agent)
        try:
            foreign = set(cards) - self.claimed(agent, cards)
            if foreign:
                raise UsageRefused(
                    403,
                    f"{agent} never claimed card #{min(foreign)}: usage is recorded only against the cards the "
                    "agent held; nothing was recorded",
                )
            taken = set(cards) - self.last_held(agent, cards)
            if taken:
                raise UsageRefused(
                    403,
                    f"card #{min(taken)} was claimed by another agent after {agent}: usage is recorded only against "
                    "a card you hold or held last; nothing was recorded",
                )
            if per_hour and self.usage_rows(agent, ts - 3600) + len(rows) > per_hour:
                raise UsageRefused(
                    429,
                    f"{agent} posted {per_hour} usage records in the last hour, the most one agent may "
                    f"(HIVEBOARD_QUOTAS__USAGE_RECORDS_PER_HOUR={per_hour}); nothing was recorded: post the "
                    "session's totals in fewer rows, or later",
                )
            for r in rows:
                self.execute(
                    "INSERT INTO token_usage (agent, task_id, session_id, model, input_tokens, output_tokens, "
                    "cache_creation_tokens, cache_read_tokens, messages, recorded_at) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        agent,
                        r["task_id"],
                        session_id,
                        r["model"],
                        r["input_tokens"],
                        r["output_tokens"],
                        r["cache_creation_tokens"],
                        r["cache_read_tokens"],
                        r["messages"],
                        ts,
                    ],
                )
        except BaseException:
            self.execute("ROLLBACK")
            raise
        self.execute("COMMIT")
        return cards

    def _begin_write(self, agent: str) -> None:
        """A write transaction in which a check and its write are one step: SQLite's write lock, or on PostgreSQL
        the agent's scope lock, which every write that counts the agent's rows takes (board/postgres.py)."""
        if self.postgres:
            self.execute("BEGIN")
            self.execute(*scopes.lock_statement([scopes.agent(agent)]))
        else:
            self.execute("BEGIN IMMEDIATE")
