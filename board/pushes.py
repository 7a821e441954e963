"""What an agent is told unasked, as it happens (server/channel.py pushes it into a Claude Code session), and what
it was told already.

An agent must act on: a direct message to it, a verdict on its card (a review's or a person's decision: both reach
its inbox with a verdict intent, as the hooks read them too), a card reserved for it that is ready to claim. Each is
an item with a key; `first` records the key once per agent, so a session that reconnects (a new server process)
or a second process of the same agent is not told twice.
"""

from __future__ import annotations

from pydantic import BaseModel

from . import scopes
from .db import Store, now
from .hook_view import VERDICT_INTENTS


class Push(BaseModel):
    """One thing to tell an agent: `key` names it once and for all (what `first` records)."""

    key: str
    kind: str  # "message", "verdict" or "ready"
    sender: str  # who it comes from: an agent, a person, "review" or "system"
    task_id: int | None = None
    message_id: int | None = None
    intent: str | None = None
    summary: str
    title: str | None = None  # the card's, for "ready"


KEEP_SECONDS = 30 * 86_400  # how long what an agent was told is remembered (a session gone longer is told again)
PRUNE_EVERY = 3_600.0  # seconds between two prunings by one process


class Pushes:
    def __init__(self, store: Store):
        self.store = store
        self._pruned = 0.0

    def message(self, agent: str, message_id: int) -> Push | None:
        """The message as a push to `agent` when it reached the agent's inbox and is for it to act on (a direct
        message, or a verdict on a card), else None."""
        found = self._messages(agent, "m.id = ?", [message_id], 1)
        return found[0] if found else None

    def ready(self, agent: str, task_id: int) -> Push | None:
        """The card as a push to `agent` when it waits in todo reserved for the agent, else None; its key names
        the card's version, so a card sent back to the agent again is told again."""
        found = self._ready(agent, "id = ?", [task_id], 1)
        return found[0] if found else None

    def waiting(self, agent: str, limit: int = 20) -> list[Push]:
        """What `agent` must act on now, oldest first: its unread messages to act on, the cards ready for it (a
        session that connects is told what came while it was away, and `first` skips what it was told)."""
        return self._messages(agent, "i.read_at IS NULL", [], limit) + self._ready(agent, "1 = 1", [], limit)

    def _messages(self, agent: str, where: str, params: list, limit: int) -> list[Push]:
        marks = ", ".join("?" * len(VERDICT_INTENTS))
        with self.store.read() as db:
            rows = db.execute(
                "SELECT m.id, m.sender, m.intent, m.task_id, m.summary FROM inbox i JOIN messages m ON "
                f"m.id = i.message_id WHERE i.agent = ? AND {where} AND (m.recipient = ? OR m.intent IN ({marks})) "
                "ORDER BY m.id LIMIT ?",
                [agent, *params, agent, *VERDICT_INTENTS, limit],
            ).fetchall()
        return [
            Push(
                key=f"message:{id_}",
                kind="verdict" if intent in VERDICT_INTENTS else "message",
                sender=sender,
                task_id=task_id,
                message_id=id_,
                intent=intent,
                summary=summary or "",
            )
            for id_, sender, intent, task_id, summary in rows
        ]

    def _ready(self, agent: str, where: str, params: list, limit: int) -> list[Push]:
        with self.store.read() as db:
            rows = db.execute(
                f"SELECT id, title, version, created_by FROM tasks WHERE {where} AND status = 'todo' "
                "AND reserved_for = ? ORDER BY id LIMIT ?",
                [*params, agent, limit],
            ).fetchall()
        return [
            Push(key=f"ready:{id_}:{version}", kind="ready", sender=creator, task_id=id_, summary="", title=title)
            for id_, title, version, creator in rows
        ]

    def first(self, agent: str, key: str) -> bool:
        """Record that `agent` was told `key`; False when it had been already (nothing is written then)."""
        ts = now()
        with self.store.write(scopes.agent(agent)) as db:
            if ts - self._pruned > PRUNE_EVERY:
                self._pruned = ts
                db.execute("DELETE FROM channel_pushes WHERE pushed_at < ?", [ts - KEEP_SECONDS])
            return (
                db.execute(
                    "INSERT INTO channel_pushes (agent, item, pushed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    [agent, key, ts],
                ).rowcount
                == 1
            )
