"""bench/_server.py with the claim cut down (bench_claim_floor.py's variants), to find what the claim's parts cost.

    python bench/_claim_floor_server.py --home DIR --port PORT [--background] --variant VARIANT

Only a claim by task_id of a card in todo is cut down (what bench_claim_floor.py times); every other call, and a claim
this variant does not cover, runs the product's code. SQLite only. The variants, each less than the one before:

  product         the product's claim, unchanged
  statements      the claim's writes as bare statements: the lease sweep's probe, the guarded UPDATE, its history row,
                  its message to the pool and the card's thread (the same columns the product writes) and the two
                  events; the answer built as the product builds it (Board._granted) and the lessons computed ahead
                  read as the product reads them. Not done: the reads of the card, its dependencies and its task
                  type's digest, the state machine's checks, the message's followers.
  no-message      `statements` without the claim's message (and its event)
  fixed-answer    `no-message`, with the answer built for the first claim handed to every later one

Nothing here is the product: these are measurements of what the product's claim would cost without some of what it
promises (a followers' message, its checks, an answer of its own).
"""

from __future__ import annotations

import json
import sys

import _server

from hiveboard.board.db import iso, now
from hiveboard.board.events import InboxChanged, TaskChanged
from hiveboard.board.tasks import Board

VARIANTS = ("product", "statements", "no-message", "fixed-answer")
PROBE = "SELECT 1 FROM tasks WHERE status = 'in_progress' AND lease_expires_at < ? LIMIT 1"
CLAIM = (
    "UPDATE tasks SET status = 'in_progress', lease_expires_at = ?, blocked_reason = NULL, assignee = ?, "
    "fencing_token = fencing_token + 1, updated_at = ?, version = version + 1 "
    "WHERE id = ? AND status = 'todo' RETURNING *"
)
HISTORY = (
    "INSERT INTO task_history (task_id, at, actor, action, from_status, to_status, note) "
    "VALUES (?, ?, ?, 'claimed', 'todo', 'in_progress', ?)"
)
MESSAGE = (
    "INSERT INTO messages (intent, task_id, sender, recipient, thread, reply_to, summary, content, priority, "
    "metadata, created_at) VALUES ('task_claim', ?, ?, NULL, ?, NULL, ?, '', 1, ?, ?) RETURNING id"
)
EVENT_META = json.dumps({"event": True})


def cut_down(variant: str) -> None:
    """Replace Board.take by `variant`'s claim (a claim by task_id only; anything else runs the product's)."""
    product = Board.take
    message = variant == "statements"
    fixed: list = []

    def take(self, actor, task_id=None, task_type=None, in_repo=False, then=None):
        if task_id is None or in_repo:
            return product(self, actor, task_id, task_type, in_repo, then)
        ts = now()
        expires = ts + self.lease_seconds
        with self.store.write() as db:
            conn = db.conn
            conn.execute(PROBE, [ts]).fetchone()
            cur = conn.execute(CLAIM, [expires, actor, ts, task_id])
            found = cur.fetchone()
            if found is None:  # not in todo: the product's claim says why
                raise _NotCovered
            row = dict(zip([d[0] for d in cur.description], found))
            conn.execute(HISTORY, [task_id, ts, actor, f"lease until {iso(expires)}"])
            self.store.emit(TaskChanged(task_id, "in_progress"))
            if message:
                summary = f"{actor} claimed task {task_id}: {row['title']}"
                mid = conn.execute(MESSAGE, [task_id, actor, f"task-{task_id}", summary, EVENT_META, ts]).fetchone()[0]
                self.store.emit(InboxChanged(mid, frozenset()))
            if fixed:
                claim = fixed[0]
            else:
                claim = self._granted(db, row, expires, fresh=True, deps=[])
                if variant == "fixed-answer":
                    fixed.append(claim)
            more = then(db, claim.task) if then is not None else None
        return claim, None, more

    def guarded(self, actor, task_id=None, task_type=None, in_repo=False, then=None):
        try:
            return take(self, actor, task_id, task_type, in_repo, then)
        except _NotCovered:  # rolled back: the product's claim answers
            return product(self, actor, task_id, task_type, in_repo, then)

    if variant != "product":
        Board.take = guarded


class _NotCovered(Exception):
    """The card was not in todo: the cut-down claim does not cover it."""


def main(argv: list[str]) -> int:
    at = argv.index("--variant") if "--variant" in argv else len(argv)
    if at + 1 >= len(argv) or argv[at + 1] not in VARIANTS:
        sys.exit(f"usage: {sys.argv[0]} --variant {{{','.join(VARIANTS)}}} and bench/_server.py's arguments")
    cut_down(argv[at + 1])
    return _server.main(argv[:at] + argv[at + 2 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
