"""The message pool: structured messages between agents, per-recipient inboxes, subscriptions.

A message is stored once in `messages`; delivery is one small row per recipient in `inbox`, which
holds that recipient's read and ack state. Recipients are worked out when the message is posted:

- an agent name            → that agent
- "role:<role>"            → every agent with that role
- "everyone"               → every registered agent
- no recipient (the pool)  → the people of its task (creator and assignee) for a message an agent
                             wrote; for a board event, only whoever it needs (`needs`: a verdict to the
                             agent whose work it judged, a card waiting for a person to its creator too,
                             a contest's decision to its creator, a card someone else moved to its holder)
- and in every case, agents subscribed to its intent, its task or its thread/channel,
  minus the sender.

Board events (task_assignment, task_claim, status_update, output.complete, review.started, verdicts) are
posted by the board in the same transaction as the change they describe, so the pool is the board's event
log, and an inbox holds what its agent has to act on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from pydantic import BaseModel, Field

from . import scopes
from ._sqlite_utils import Database
from .agents import Agents
from .cursor import decode_cursor, encode_cursor
from .db import Store, iso, now, placeholders, rows, rows_many
from .errors import InvalidInput
from .events import InboxChanged, encoded_sql
from .knowledge import Knowledge
from .quotas import BROADCAST, MESSAGE, Quotas

KNOWN_INTENTS: tuple[str, ...] = (
    "task_assignment",
    "task_claim",
    "status_update",
    "request_help",
    "answer",
    "output.complete",
    "output.updated",
    "test_results",
    "critique",
    "approval",
    "proposal",
    "proposal.feedback",
    "consensus_recommendation",
    "consensus_reached",
    "info",
)
INTENT_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,39}$")
THREAD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,79}$")
MessagePriority = Literal["low", "normal", "high", "urgent"]
MESSAGE_PRIORITY_RANK: dict[str, int] = {p: rank for rank, p in enumerate(get_args(MessagePriority))}
RANK_MESSAGE_PRIORITY: dict[int, str] = {rank: p for p, rank in MESSAGE_PRIORITY_RANK.items()}
SubscriptionKind = Literal["intent", "task", "channel"]
PREVIEW_CHARS = 280
# a verdict (with its revision brief) reaches its reader's inbox whole up to this: it is what the agent must act
# on next, and a preview would send it back for the rest; past it, the preview says how to get the rest
VERDICT_CHARS = 8_000
FULL_PAGE_CHARS = 100_000  # the content one get_messages(full=true) page carries at most (one message at least)


# what the shared log shows: never a direct message between two agents
POOL_VISIBLE = "(m.recipient IS NULL OR m.recipient = 'everyone' OR m.recipient LIKE 'role:%')"


class NewMessage(BaseModel):
    intent: str
    content: str = ""
    summary: str | None = None
    recipient: str | None = None
    task_id: int | None = None
    thread: str | None = None
    reply_to: int | None = None
    priority: MessagePriority = "normal"
    metadata: dict = {}


class Message(BaseModel):
    """One message, as an agent reads it."""

    id: int
    intent: str
    sender: str
    recipient: str | None = Field(description="agent, role:<role>, everyone, or null for the pool")
    task_id: int | None = None
    thread: str
    reply_to: int | None = None
    priority: MessagePriority
    summary: str | None = Field(
        None, description="the sender's headline; absent when it would only repeat the start of content"
    )
    content: str = Field(description="full text when full=true or a verdict, else a preview")
    content_chars: int
    metadata: dict = {}
    created_at: str
    read: bool | None = Field(None, description="your read state (inbox only)")
    acked: bool | None = Field(None, description="your ack state (inbox only)")


class MessagePage(BaseModel):
    messages: list[Message]
    unread: int = Field(description="your unread messages in all (inbox), before this call marked any read")
    next_cursor: str | None = None
    acked: int | None = Field(None, description="how many of the ack ids were acknowledged")
    hint: str | None = Field(None, description="why the page ends early, and how to get the rest")


def _within_budget(messages: list[Message]) -> int:
    """How many of a page's messages fit in one answer: as many as FULL_PAGE_CHARS of content hold (at least
    one), so a page of 100 messages of 64,000 characters (full=true) is not one 6 MB answer."""
    total = 0
    for n, m in enumerate(messages):
        total += len(m.content)
        if total > FULL_PAGE_CHARS and n > 0:
            return n
    return len(messages)


def _budget_hint(kept: int) -> str:
    return (
        f"this page stops after {kept} message(s): a page carries at most {FULL_PAGE_CHARS:,} characters of content; "
        "call get_messages again with cursor=next_cursor for the rest"
    )


class Subscription(BaseModel):
    kind: SubscriptionKind
    value: str
    created_at: str


def _uncursor(cursor: str) -> tuple[int, ...]:
    """(phase, message id): phase 0 pages the unread messages, 1 the read ones."""
    return decode_cursor(cursor, "get_messages", valid=lambda parts: parts[0] in (0, 1))


# Board events that need someone: a verdict needs the agent whose work it judged (and a card waiting for a
# person needs its creator too); the referee's decision on competing attempts needs the creator who asked for
# them; a card moved by someone else needs its holder. Every other event (a claim, a completion, a review
# starting) is routine: it stays in the pool, where get_messages(box="pool") and subscriptions to its intent
# or task follow it.
VERDICTS = ("critique", "approval", "needs_human")


def needs(intent: str, actor: str, creator: str, holder: str | None, reserved_for: str | None) -> set[str]:
    """Whose inbox a board event about a card goes to (besides subscribers): see VERDICTS above."""
    author = holder or reserved_for
    if intent in VERDICTS:
        return {p for p in (author, creator if intent == "needs_human" else None) if p}
    if intent == "contest.decided":
        return {creator}
    if intent == "status_update" and author and author != actor:
        return {author}
    return set()


def is_direct(recipient: str | None) -> bool:
    """A message to one agent (not the pool, everyone or a role)."""
    return recipient is not None and recipient != "everyone" and not recipient.startswith("role:")


# what a message needs of the task it names (`_found_card`)
CARD = "SELECT created_by, assignee, reserved_for, task_type FROM tasks WHERE id = ?"


def _found_card(found: list[dict], task_id: int) -> tuple:
    """The (creator, holder, reserved for, type) of the task a message names, from CARD's rows; refused when there is
    no such task."""
    if not found:
        raise InvalidInput(f"task {task_id} does not exist; omit task_id or use an id from list_tasks")
    card = found[0]
    return card["created_by"], card["assignee"], card["reserved_for"], card["task_type"]


def _card_audience(msg: NewMessage, sender: str, card: tuple) -> set[str]:
    """Whose inbox a message to the pool naming a card goes to, from the card's (creator, holder, reserved for):
    a board event's `needs`, else all three."""
    return needs(msg.intent, sender, *card) if msg.metadata.get("event") else {p for p in card if p}


def parse_time(value: str, what: str) -> float:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:  # a time without a zone is UTC, like every time hiveboard shows
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    except ValueError as exc:
        raise InvalidInput(f"{what} {value!r} is not an ISO 8601 time; send e.g. '2026-11-22T09:30:00Z'") from exc


# a message's columns as _message reads them
COLUMNS = "id, intent, sender, recipient, task_id, thread, reply_to, priority, summary, content, metadata, created_at"
MESSAGE_COLUMNS = tuple(c.strip() for c in COLUMNS.split(","))
IN_INBOX = ", ".join(f"m.{c}" for c in MESSAGE_COLUMNS)  # a message's COLUMNS beside its inbox row's
# what a new message's INSERT gives, in this order (`post`'s values)
INSERTED = "intent, task_id, sender, recipient, thread, reply_to, summary, content, priority, metadata, created_at"


@dataclass
class Posted:
    """A message `Messages.post` stored: its row (COLUMNS), there once the transaction has committed (on a database
    server its statement may travel with the COMMIT)."""

    row: tuple | None = None


def _message(
    row: tuple, full: bool, read: bool | None = None, acked: bool | None = None, verdicts_whole: bool = False
) -> Message:
    """A message from its COLUMNS (no JSON parse of the common empty metadata: a page is read on every
    get_messages, and building it can cost more than the SQL); `verdicts_whole`: a board's verdict comes up to
    VERDICT_CHARS, not a preview (its reader's inbox)."""
    i, intent, sender, recipient, task_id, thread, reply_to, priority, summary, full_content, metadata, created_at = row
    content = full_content
    shown = PREVIEW_CHARS
    if verdicts_whole and intent in VERDICTS and json.loads(metadata).get("event"):  # the board's, not an agent's
        shown = VERDICT_CHARS
    if not full and len(content) > shown:
        content = content[:shown] + f"… ({len(full_content)} characters; full=true for all)"
    return Message(
        id=i,
        intent=intent,
        sender=sender,
        recipient=recipient,
        task_id=task_id,
        thread=thread,
        reply_to=reply_to,
        priority=RANK_MESSAGE_PRIORITY[priority],
        summary=None if full_content.lstrip().startswith(summary) else summary,
        content=content,
        content_chars=len(full_content),
        metadata={} if metadata == "{}" else json.loads(metadata),
        created_at=iso(created_at),
        read=read,
        acked=acked,
    )


class Messages:
    def __init__(
        self, store: Store, agents: Agents, knowledge: Knowledge, limits, quotas: Quotas | None = None
    ) -> None:
        self.store = store
        self.agents = agents
        self.knowledge = knowledge
        self.limits = limits
        self.quotas = quotas or Quotas(store)  # none unless the board was given some

    # ----------------------------------------------------------------- posting

    def event(
        self,
        db: Database,
        actor: str,
        intent: str,
        task_id: int,
        summary: str,
        content: str = "",
        recipient: str | None = None,
        metadata: dict | None = None,
        row: dict | None = None,
    ) -> None:
        """Post a board event (a claim, a move, a verdict) to the pool inside the change's own transaction.
        `row`: the task's current row, when the caller has it (else it is read). Nobody waits for it: on a
        database server an event to the pool is one statement sent with the transaction's next one."""
        # made here from the board's own values (its intents, cut to the limits): nothing for _check to refuse
        message = NewMessage.model_construct(
            intent=intent,
            task_id=task_id,
            recipient=recipient,
            summary=summary[: self.limits.message_summary],
            content=content[: self.limits.message_chars],
            metadata={"event": True, **(metadata or {})},
        )
        self.post(db, actor, message, row, unwaited=True, checked=True)

    def _check(self, msg: NewMessage) -> None:
        lim = self.limits
        if not INTENT_RE.match(msg.intent):
            raise InvalidInput(
                f"intent {msg.intent!r} is not valid: a short lowercase word such as {', '.join(KNOWN_INTENTS[:6])}"
            )
        if len(msg.content) > lim.message_chars:
            raise InvalidInput(
                f"content is {len(msg.content)} characters; the limit is {lim.message_chars}. "
                "Send a summary and put the rest in a task artifact"
            )
        if msg.summary is not None and len(msg.summary) > lim.message_summary:
            raise InvalidInput(f"summary is {len(msg.summary)} characters; the limit is {lim.message_summary}")
        if not msg.content.strip() and not (msg.summary or "").strip():
            raise InvalidInput("a message needs content= or summary=")
        meta = json.dumps(msg.metadata)
        if len(meta) > lim.metadata_chars:
            raise InvalidInput(f"metadata is {len(meta)} characters of JSON; the limit is {lim.metadata_chars}")
        if msg.thread is not None and not THREAD_RE.match(msg.thread):
            raise InvalidInput(
                f"thread {msg.thread!r} is not valid: 1-80 characters of letters, digits and "
                "_ . : / - (e.g. 'api-design')"
            )

    def _recipients(
        self, db: Database, sender: str, msg: NewMessage, thread: str, card: tuple | None
    ) -> tuple[str | None, set[str], tuple[str, list] | None, tuple[str, list] | None]:
        """(the recipient as stored, the agents whose inbox gets the message, the read of its followers whose
        agents get it too, or None: the caller reads it when it needs to, and the read that finds a direct
        recipient registered, or None: `_registered` checks its rows). `card`: the (creator, holder, reserved for)
        of the message's task, if it names one."""
        registered = None
        to: set[str] = set()
        recipient = msg.recipient.strip() if msg.recipient else None
        if recipient == "everyone":
            to |= {r[0] for r in db.execute("SELECT name FROM agents")}
        elif recipient and recipient.startswith("role:"):
            role = recipient[5:]
            members = {r[0] for r in db.execute("SELECT name FROM agents WHERE role = ?", [role])}
            if not members:
                roles = sorted({r[0] for r in db.execute("SELECT DISTINCT role FROM agents WHERE role IS NOT NULL")})
                raise InvalidInput(f"no agent has role {role!r}; roles in use: {', '.join(roles) or 'none'}")
            to |= members
        elif recipient:
            recipient = recipient.lower()
            registered = ("SELECT 1 AS found FROM agents WHERE name = ?", [recipient])
            to.add(recipient)
        elif card is not None:
            to |= _card_audience(msg, sender, card)
        followers = None
        if not is_direct(recipient):  # a direct message reaches its addressee only, whoever follows its intent or task
            followers = (
                "SELECT agent FROM subscriptions WHERE (kind = 'intent' AND value = ?) OR (kind = 'task' AND "
                "value = ?) OR (kind = 'channel' AND value = ?)",
                [msg.intent, str(msg.task_id), thread],
            )
        to.discard(sender)
        return recipient, to, followers, registered

    def _registered(self, recipient: str, found: list[dict]) -> None:
        """Refuse a message to `recipient` unless its registration was `found` (the rows of `_recipients`'s read)."""
        if not found:
            raise InvalidInput(
                f"recipient {recipient!r} is not a registered agent; send to an agent name, "
                f"'role:<role>', 'everyone', or leave it out to post to the pool. Known "
                f"agents: {', '.join(self.agents.names(20))}"
            )

    @staticmethod
    def _card(db: Database, task_id: int | None) -> tuple | None:
        """What a message needs of the task it names: (creator, holder, reserved for, type)."""
        if task_id is None:
            return None
        return _found_card(rows(db, CARD, [task_id]), task_id)

    def post(
        self,
        db: Database,
        sender: str,
        msg: NewMessage,
        row: dict | None = None,
        charged: bool = False,
        unwaited: bool = False,
        checked: bool = False,
    ) -> Posted | None:
        """Store a message inside the caller's write transaction; what was stored (`Posted`), complete once the
        transaction commits. `row`: the current row of the task it names, when the caller has it; `charged`: an
        agent's own message, counted against its quotas (board/quotas.py) once its recipients are known and before
        anything is written; `unwaited`: nobody reads what it returns (None is returned); `checked`: the board made
        the message itself, within the limits (`event`). Where the dialect has writing CTEs, a message that does not
        join the shared memory (a direct one, a card's event) is written by one statement sent with the
        transaction's next one, not waited for (`_post_written`)."""
        if not checked:
            self._check(msg)
        later = None  # the card's read, when it goes with the sender's quota usage (one round trip on a server)
        if row is not None and row["id"] == msg.task_id:
            card: tuple | None = (row["created_by"], row["assignee"], row["reserved_for"], row["task_type"])
        elif charged and msg.task_id is not None and msg.reply_to is None:
            card, later = None, (CARD, [msg.task_id])
        else:
            card = self._card(db, msg.task_id)
        thread = msg.thread
        recipient_in = msg.recipient
        also: set[str] = set()
        if msg.reply_to is not None:
            parent = db.execute(
                "SELECT thread, sender, task_id, recipient FROM messages WHERE id = ?", [msg.reply_to]
            ).fetchone()
            if parent is None:
                raise InvalidInput(f"reply_to names message {msg.reply_to}, which does not exist")
            thread = thread or parent[0]
            if recipient_in is None:
                p_sender, p_recipient = parent[1], parent[3]
                if is_direct(p_recipient):  # a private exchange stays between its two ends
                    recipient_in = p_sender if p_sender != sender else p_recipient
                else:  # the thread's audience hears the reply, and so does whoever wrote the message
                    recipient_in = p_recipient
                    also = {p_sender} - {sender}
            if msg.task_id is None and parent[2] is not None:
                msg = msg.model_copy(update=dict(task_id=parent[2]))
                card = self._card(db, msg.task_id)
        if thread is None and msg.task_id is not None:
            thread = f"task-{msg.task_id}"
        if recipient_in != msg.recipient:
            msg = msg.model_copy(update=dict(recipient=recipient_in))
        recipient, to, followers, registered = self._recipients(db, sender, msg, thread or "", card and card[:3])
        to |= also
        broadcast = recipient == "everyone" or (recipient or "").startswith("role:")
        if charged and broadcast:  # the charge counts every recipient before anything is written
            to |= {r["agent"] for r in rows(db, *followers)} - {sender}
            followers = None
        # what the message needs read before it is written (a direct recipient's registration, or when charged the
        # followers of one that is not direct: never both) is read with the sender's quota usage: one round trip on
        # a database server
        if later is not None and broadcast:  # a broadcast's charge reads nothing of the message's
            card, later = self._card(db, msg.task_id), None
        reads = [registered] if registered is not None else [followers] if charged and followers is not None else []
        if later is not None:
            reads.append(later)
        if charged:
            followers = None

        def seen(found: list[list[dict]]) -> None:
            nonlocal card
            if later is not None:  # refused before anything is written when the card does not exist
                *found, got = found
                card = _found_card(got, msg.task_id)
                if not recipient:  # to the pool: the card's people hear of it, as `_recipients` would have said
                    to.update(_card_audience(msg, sender, card[:3]) - {sender})
            if registered is not None:
                self._registered(recipient, found[0])
            else:
                to.update({r["agent"] for r in found[0]} - {sender})

        if charged:
            size = len(msg.content) + len(msg.summary or "") + len(json.dumps(msg.metadata))
            if broadcast:
                self.quotas.charge(db, sender, BROADCAST, 1, size, per=max(1, len(to)))
            else:
                self.quotas.charge(db, sender, MESSAGE, 1, size, reads=reads, seen=seen if reads else None)
        elif reads:
            seen(rows_many(db, reads))
        summary = (msg.summary or msg.content.strip().splitlines()[0])[: self.limits.message_summary]
        ts = now()
        values = [
            msg.intent,
            msg.task_id,
            sender,
            recipient,
            thread,
            msg.reply_to,
            summary,
            msg.content,
            MESSAGE_PRIORITY_RANK[msg.priority],
            json.dumps(msg.metadata),
            ts,
        ]
        joins_memory = not is_direct(recipient) and not msg.metadata.get("event")
        if self.store.dialect.writing_ctes and not joins_memory:
            posted = self._post_written(db, sender, values, to, followers)
            return None if unwaited else posted
        values[4] = thread or ""
        returning = "id" if unwaited else COLUMNS
        insert = (f"INSERT INTO messages ({INSERTED}) VALUES ({placeholders(values)}) RETURNING {returning}", values)
        # the followers are read with the insert (one round trip on a database server)
        *read, inserted = rows_many(db, [followers, insert] if followers is not None else [insert])
        stored = inserted[0]
        message_id = stored["id"]
        for found in read:
            to |= {r["agent"] for r in found} - {sender}
        if thread is None:
            stored["thread"] = f"msg-{message_id}"
            db.execute("UPDATE messages SET thread = ? WHERE id = ?", [stored["thread"], message_id])
        if to:
            db.conn.executemany(
                "INSERT INTO inbox (agent, message_id) VALUES (?, ?)", [(a, message_id) for a in sorted(to)]
            )
        if joins_memory:  # direct messages and the board's events stay out of the shared memory
            task_type = card[3] if card else None
            self.knowledge.add(
                db,
                kind="message",
                text=f"{summary}\n{msg.content[:4000]}".strip(),
                created_by=sender,
                task_type=task_type,
                task_id=msg.task_id,
                title=summary,
                tags=[msg.intent],
                source=f"message:{message_id}",
                unwaited=True,  # on a database server sent with the commit, with its indexing queue row and event
            )
        self.store.emit(InboxChanged(message_id, frozenset(to)))
        if message_id % 10_000 == 0:  # (a database server's own autovacuum keeps them for what `_post_written` wrote)
            self.store.optimize()  # keep the planner's statistics in step with a growing pool
        return None if unwaited else Posted(tuple(stored.values()))

    def _post_written(
        self, db: Database, sender: str, values: list, to: set[str], followers: tuple[str, list] | None
    ) -> Posted:
        """`post`'s message as one statement (a dialect with writing CTEs): the message (`values`, its columns as
        INSERTED names them; a thread of None is the message's own, msg-<id>), the inbox rows of `to` and of
        the followers (when read), and the InboxChanged event's row (encoded as `encode` does), sent with the
        transaction's next statement. What it stored, and its event, reach `Posted` and the notifier once the
        transaction commits."""
        followed, followed_params = followers if followers is not None else ("", [])
        sql = (
            "WITH n AS (SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id), "
            f"m AS (INSERT INTO messages (id, {INSERTED}) VALUES ((SELECT id FROM n), ?, ?, ?, ?, "
            f"coalesce(?, 'msg-' || (SELECT id FROM n)), ?, ?, ?, ?, ?, ?) RETURNING {COLUMNS}), "
            "t AS (SELECT DISTINCT a.agent FROM (SELECT unnest(?::text[]) AS agent"
            f"{f' UNION {followed}' if followed else ''}) AS a WHERE a.agent <> ?), "
            "i AS (INSERT INTO inbox (agent, message_id) SELECT t.agent, m.id FROM t, m), "
            "e AS (INSERT INTO events (kind, data) SELECT ?::text, "
            + encoded_sql(
                [
                    ("message_id", "m.id::text"),
                    ("agents", "coalesce((SELECT json_agg(agent ORDER BY agent) FROM t), '[]'::json)::text"),
                ]
            )
            + " FROM m RETURNING id) "
            "SELECT m.*, (SELECT id FROM e) AS event_id, ARRAY(SELECT agent FROM t ORDER BY agent) AS agents FROM m"
        )
        params = [*values, sorted(to), *followed_params, sender, InboxChanged.kind, self.store.origin]
        posted = Posted()

        def written(found: dict) -> tuple[int, InboxChanged]:
            posted.row = tuple(found[c] for c in MESSAGE_COLUMNS)
            return found["event_id"], InboxChanged(found["id"], frozenset(found["agents"]))

        self.store.emit_written(db, sql, params, written)
        return posted

    def publish(self, sender: str, msg: NewMessage) -> Message:
        """Post a message from an agent (its own transaction)."""
        with self.store.write(scopes.agent(sender)) as db:
            posted = self.post(db, sender, msg, charged=True)
        return _message(posted.row, full=True)

    # ----------------------------------------------------------------- reading

    def _messages(self, db: Database, ids: list[int], full: bool, state: dict | None = None) -> list[Message]:
        if not ids:
            return []
        marks = placeholders(ids)
        by_id = {r[0]: r for r in db.execute(f"SELECT {COLUMNS} FROM messages WHERE id IN ({marks})", ids)}
        return [_message(by_id[i], full, *(state[i] if state is not None else (None, None))) for i in ids]

    def _filters(self, task_id, intent, thread, sender, since) -> tuple[list[str], list]:
        where, params = [], []
        if task_id is not None:
            where.append("m.task_id = ?"), params.append(task_id)
        if intent is not None:
            where.append("m.intent = ?"), params.append(intent)
        if thread is not None:
            where.append("m.thread = ?"), params.append(thread)
        if sender is not None:
            where.append("m.sender = ?"), params.append(sender.strip().lower())
        if since is not None:
            where.append("m.created_at >= ?"), params.append(parse_time(since, "since"))
        return where, params

    def has_unread(self, agent: str) -> bool:
        """Whether the agent has an unread message (one index step, however many there are)."""
        return (
            self.store.db.execute("SELECT 1 FROM inbox WHERE agent = ? AND read_at IS NULL LIMIT 1", [agent]).fetchone()
            is not None
        )

    def unread_count(self, agent: str) -> int:
        return self.store.db.execute(
            "SELECT count(*) FROM inbox WHERE agent = ? AND read_at IS NULL", [agent]
        ).fetchone()[0]

    def inbox(
        self,
        agent: str,
        *,
        unread_only: bool = True,
        task_id: int | None = None,
        intent: str | None = None,
        thread: str | None = None,
        sender: str | None = None,
        since: str | None = None,
        full: bool = False,
        limit: int = 20,
        cursor: str | None = None,
        mark_read: bool = True,
    ) -> MessagePage:
        """The agent's inbox: unread first (oldest first), then read ones (newest first).

        Returned unread messages are marked read when unread_only and mark_read are both true;
        browsing with unread_only=False never changes read state, so its pages stay stable.
        """
        if not 1 <= limit <= 100:
            raise InvalidInput("limit must be between 1 and 100")
        where, params = self._filters(task_id, intent, thread, sender, since)
        phase, after = _uncursor(cursor) if cursor else (0, 0)
        base = (
            f"SELECT i.message_id, i.read_at, i.acked_at, {IN_INBOX} FROM inbox i JOIN messages m ON m.id = i.message_id "
            "WHERE i.agent = ?" + "".join(f" AND {w}" for w in where)
        )
        marking = unread_only and mark_read
        # reading that marks messages read picks and marks them in one write transaction: two readers of
        # one inbox (two windows, or a waiting call beside another) never get the same message
        with self.store.write(scopes.agent(agent)) if marking else self.store.read() as db:
            # the unread count and the pages travel together, the messages with their place in the inbox (one
            # round trip on a database server): the unread page (oldest first) and, when read ones may follow on
            # this page, the read page (newest first; the part after the unread ones is used)
            statements = [("SELECT count(*) AS n FROM inbox WHERE agent = ? AND read_at IS NULL", [agent])]
            if phase == 0:
                statements.append(
                    (
                        base + " AND i.read_at IS NULL AND i.message_id > ? ORDER BY i.message_id LIMIT ?",
                        [agent, *params, after, limit + 1],
                    )
                )
            if not unread_only:
                below = phase == 1 and after  # a later page of the read ones: those older than its cursor
                statements.append(
                    (
                        base
                        + " AND i.read_at IS NOT NULL"
                        + (" AND i.message_id < ?" if below else "")
                        + " ORDER BY i.message_id DESC LIMIT ?",
                        [agent, *params, *([after] if below else []), limit + 1],
                    )
                )
            counted, *found = rows_many(db, statements)
            unread = counted[0]["n"]
            picked = found[0] if phase == 0 else []
            if not unread_only and len(picked) <= limit:
                picked = picked + found[-1][: limit + 1 - len(picked)]
            more = len(picked) > limit
            picked = picked[:limit]
            messages = [
                _message(
                    [r[c] for c in MESSAGE_COLUMNS],
                    full,
                    r["read_at"] is not None,
                    r["acked_at"] is not None,
                    verdicts_whole=True,
                )
                for r in picked
            ]
            kept = _within_budget(messages)
            cut = kept < len(messages)
            if cut:  # the rest stay unread, for the next page
                messages, picked, more = messages[:kept], picked[:kept], True
            fresh = [m.id for m in messages if not m.read]
            if marking and fresh:  # sent with the commit
                ts = now()
                db.conn.executemany(
                    "UPDATE inbox SET read_at = ? WHERE agent = ? AND message_id = ? AND read_at IS NULL",
                    [(ts, agent, i) for i in fresh],
                )
        next_cursor = None
        if more:
            last = picked[-1]
            next_cursor = encode_cursor(1 if last["read_at"] is not None else 0, last["message_id"])
        hint = _budget_hint(len(messages)) if cut else None
        return MessagePage(messages=messages, unread=unread, next_cursor=next_cursor, hint=hint)

    def pool(
        self,
        *,
        task_id: int | None = None,
        intent: str | None = None,
        thread: str | None = None,
        sender: str | None = None,
        since: str | None = None,
        full: bool = False,
        limit: int = 20,
        cursor: str | None = None,
    ) -> MessagePage:
        """The shared log (any agent may read it): oldest first, e.g. a task's or a thread's whole history.

        Direct messages between agents are never in it, a task's log included: only their two ends see
        them, in their inboxes.
        """
        if not 1 <= limit <= 100:
            raise InvalidInput("limit must be between 1 and 100")
        where, params = self._filters(task_id, intent, thread, sender, since)
        after = _uncursor(cursor)[1] if cursor else 0
        where.append(POOL_VISIBLE)
        with self.store.read() as db:
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT m.id FROM messages m WHERE m.id > ?"
                    + "".join(f" AND {w}" for w in where)
                    + " ORDER BY m.id LIMIT ?",
                    [after, *params, limit + 1],
                )
            ]
            more = len(ids) > limit
            ids = ids[:limit]
            messages = self._messages(db, ids, full)
        kept = _within_budget(messages)
        cut = kept < len(messages)
        if cut:
            messages, ids, more = messages[:kept], ids[:kept], True
        return MessagePage(
            messages=messages,
            unread=0,
            next_cursor=encode_cursor(0, ids[-1]) if more else None,
            hint=_budget_hint(kept) if cut else None,
        )

    def latest(
        self, *, task_id: int | None = None, intent: str | None = None, before: int | None = None, limit: int = 50
    ) -> list[Message]:
        """The pool newest first (what a person scrolling the board's messages wants), `before` a message id."""
        if not 1 <= limit <= 200:
            raise InvalidInput("limit must be between 1 and 200")
        where, params = self._filters(task_id, intent, None, None, None)
        where.append(POOL_VISIBLE)
        if before is not None:
            where.append("m.id < ?"), params.append(before)
        with self.store.read() as db:
            ids = [
                r[0]
                for r in db.execute(
                    "SELECT m.id FROM messages m WHERE " + " AND ".join(where) + " ORDER BY m.id DESC LIMIT ?",
                    [*params, limit],
                )
            ]
            return self._messages(db, ids, True)

    @staticmethod
    def check_query(since: str | None = None, cursor: str | None = None) -> None:
        """Refuse a bad `since` or `cursor` before anything else of the call is written."""
        if since is not None:
            parse_time(since, "since")
        if cursor:
            _uncursor(cursor)

    def ack(self, agent: str, ids: list[int]) -> int:
        """Acknowledge (and mark read) messages in the agent's inbox; all or nothing."""
        if not ids or len(ids) > 500:
            raise InvalidInput("pass 1-500 message ids to ack")
        ids = list(dict.fromkeys(ids))
        ts = now()
        with self.store.write(scopes.agent(agent)) as db:
            marks = placeholders(ids)
            mine = {
                r[0]
                for r in db.execute(
                    f"SELECT message_id FROM inbox WHERE agent = ? AND message_id IN ({marks})", [agent, *ids]
                )
            }
            missing = [i for i in ids if i not in mine]
            if missing:
                raise InvalidInput(f"messages {missing} are not in your inbox; ack only ids get_messages gave you")
            db.conn.executemany(
                "UPDATE inbox SET acked_at = coalesce(acked_at, ?), read_at = coalesce(read_at, ?) "
                "WHERE agent = ? AND message_id = ?",
                [(ts, ts, agent, i) for i in ids],
            )
        return len(ids)

    # ----------------------------------------------------------------- subscriptions

    def subscribe(self, agent: str, kind: str, value: str, on: bool = True) -> list[Subscription]:
        value = value.strip()
        if kind == "intent" and not INTENT_RE.match(value):
            raise InvalidInput(f"intent {value!r} is not valid (e.g. output.complete, critique)")
        if kind == "task":
            if not (value.isascii() and value.isdigit() and len(value) < 19):
                raise InvalidInput(f"task {value!r} is not a task id; send the number, e.g. '42'")
            value = str(int(value))
        if kind == "channel" and not THREAD_RE.match(value):
            raise InvalidInput(f"channel {value!r} is not valid: letters, digits and _ . : / -")
        with self.store.write(scopes.agent(agent)) as db:
            if kind == "task" and db.execute("SELECT 1 FROM tasks WHERE id = ?", [int(value)]).fetchone() is None:
                raise InvalidInput(f"task {value} does not exist")
            if on:
                if db.execute("SELECT count(*) FROM subscriptions WHERE agent = ?", [agent]).fetchone()[0] >= 100:
                    raise InvalidInput("you have 100 subscriptions already; unsubscribe from some first")
                db.execute(
                    "INSERT INTO subscriptions (agent, kind, value, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    [agent, kind, value, now()],
                )
            else:
                cur = db.execute(
                    "DELETE FROM subscriptions WHERE agent = ? AND kind = ? AND value = ?", [agent, kind, value]
                )
                if cur.rowcount == 0:
                    raise InvalidInput(f"you are not subscribed to {kind} {value!r}")
        return self.subscriptions(agent)

    def subscriptions(self, agent: str) -> list[Subscription]:
        return [
            Subscription(kind=r[0], value=r[1], created_at=iso(r[2]))
            for r in self.store.db.execute(
                "SELECT kind, value, created_at FROM subscriptions WHERE agent = ? ORDER BY kind, value", [agent]
            )
        ]
