"""The board's schema, declared once: every table, its columns, keys and indexes, in the types both databases share.

This is what the two migration chains must build, not how they build it. The chains stay as they are, frozen:
board/migrations.py (SQLite) and board/pg_migrations.py (PostgreSQL) upgrade existing databases step by step, and
tests/board/test_schema.py applies each to a fresh database, reads back what it made and compares it with
TABLES. A column added to one chain only, or to the chains but not here, fails that test.

Portable types (TYPES maps each to what each database calls it):

- `ID`: the row's own number, given by the database (SQLite's INTEGER PRIMARY KEY, PostgreSQL's bigint identity)
- `INT`: an integer that stays small (priorities, rounds, counts of a card's things)
- `BIGINT`: an integer that may not (a reference to another row's id, token and character totals)
- `REAL`: a float; every time is Unix seconds
- `TEXT`, `JSON` (a JSON document kept as text), `FLAG` (a boolean kept as 0 or 1), `BYTES` (a vector)

A column is NOT NULL unless it says `null=True`. `only=` marks what one database has and the other does not:
keyword search is SQLite's FTS5 table `memory_fts` (with its triggers) and PostgreSQL's generated `search`
column with its GIN index; they are declared below, where they live, not hidden. So are the storage choices one
database makes: `without_rowid` (SQLite keeps the rows in the key's b-tree) and `include` (PostgreSQL's key also
holds a few columns), and PostgreSQL's extra index `tasks_todo`.

Differences between the chains that are inherent and harmless, so not checked:
- SQLite lets a PRIMARY KEY column of a rowid table hold NULL (a documented legacy of SQLite); no code writes one.
- SQLite ids are AUTOINCREMENT (never reused) except those of SQLITE_PLAIN_IDS, whose newest id could come again
  after its row is deleted; only events are deleted, oldest first, the newest kept.
- PostgreSQL's ids are identities except POSTGRESQL_SERIAL_IDS' bigserial: both are a sequence the copy moves past.
- Triggers' bodies, PostgreSQL's text search configuration `hiveboard` and its trigger functions are written per
  dialect in the chains (the triggers' names are declared and checked).
- Types SQLite does not tell apart: INT and BIGINT are both its INTEGER.
"""

from __future__ import annotations

from dataclasses import dataclass

SQLITE, POSTGRESQL = "sqlite", "postgresql"

ID, INT, BIGINT, REAL, TEXT, JSON, FLAG, BYTES, TSVECTOR, XID8 = (
    "id",
    "int",
    "bigint",
    "real",
    "text",
    "json",
    "flag",
    "bytes",
    "tsvector",
    "xid8",
)
TYPES: dict[str, dict[str, str]] = {
    ID: {SQLITE: "INTEGER", POSTGRESQL: "bigint"},
    INT: {SQLITE: "INTEGER", POSTGRESQL: "integer"},
    BIGINT: {SQLITE: "INTEGER", POSTGRESQL: "bigint"},
    REAL: {SQLITE: "REAL", POSTGRESQL: "double precision"},
    TEXT: {SQLITE: "TEXT", POSTGRESQL: "text"},
    JSON: {SQLITE: "TEXT", POSTGRESQL: "text"},
    FLAG: {SQLITE: "INTEGER", POSTGRESQL: "integer"},
    BYTES: {SQLITE: "BLOB", POSTGRESQL: "bytea"},
    TSVECTOR: {POSTGRESQL: "tsvector"},
    XID8: {POSTGRESQL: "xid8"},  # a transaction's id (the events' `tx`: board/postgres.py Listener)
}


class Expr(str):
    """A default that is an SQL expression, written as it is (not a quoted value)."""


# Tables whose ids an early migration wrote otherwise than the rest (above); a new table's id is AUTOINCREMENT on
# SQLite and an identity on PostgreSQL, as tests/board/test_schema.py checks.
SQLITE_PLAIN_IDS = ("reviews", "critiques", "events", "token_usage")
POSTGRESQL_SERIAL_IDS = ("token_usage",)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    null: bool = False
    default: str | int | None = None  # a Python value: '[]' is the SQL text '[]'
    ref: str | None = None  # the table whose id this column names (a foreign key)
    only: str | None = None  # the one dialect that has it

    def sql_default(self) -> str | None:
        if self.default is None:
            return None
        if isinstance(self.default, Expr):
            return str(self.default)
        return f"'{self.default}'" if isinstance(self.default, str) else str(self.default)


@dataclass(frozen=True)
class Index:
    name: str
    columns: tuple[str, ...]  # "priority DESC" for a descending key
    unique: bool = False
    where: str | None = None  # a partial index's condition
    only: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()  # the primary key; an ID column's own when empty
    unique: tuple[tuple[str, ...], ...] = ()  # UNIQUE constraints (unique indexes are in `indexes`)
    checks: tuple[str, ...] = ()  # CHECK constraints, in the SQL both databases read
    indexes: tuple[Index, ...] = ()
    triggers: tuple[tuple[str, str | None], ...] = ()  # (name, the one dialect that has it or None)
    left_behind: str | None = None  # why `hiveboard migrate` does not copy it (None: it is copied)
    only: str | None = None
    virtual: str | None = None  # SQLite's module ("fts5"): its shadow tables come with it
    without_rowid: bool = False  # SQLite keeps the rows in the primary key's b-tree
    include: tuple[str, ...] = ()  # PostgreSQL's primary key also holds these columns (INCLUDE)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.key or tuple(c.name for c in self.columns if c.type == ID)

    @property
    def has_id(self) -> bool:
        return any(c.type == ID for c in self.columns)

    def columns_in(self, dialect: str) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.only in (None, dialect))

    def indexes_in(self, dialect: str) -> tuple[Index, ...]:
        return tuple(i for i in self.indexes if i.only in (None, dialect))

    def triggers_in(self, dialect: str) -> tuple[str, ...]:
        return tuple(name for name, only in self.triggers if only in (None, dialect))


def col(name: str, type: str = TEXT, **options) -> Column:
    return Column(name, type, **options)


def null(name: str, type: str = TEXT, **options) -> Column:
    return Column(name, type, null=True, **options)


def ix(name: str, *columns: str, **options) -> Index:
    return Index(name, columns, **options)


DERIVED = "derived from other tables, rebuilt by the target"

# Parents before children: `hiveboard migrate` copies the tables in this order (board/copy.py).
TABLES: tuple[Table, ...] = (
    Table(
        "migrations",
        (col("name"), col("applied_at")),
        key=("name",),
        left_behind="the target's own chain wrote it when the store was opened",
    ),
    Table(
        "agents",
        (
            col("name"),
            null("role"),
            null("token_hash"),
            col("created_at", REAL),
            null("last_seen_at", REAL),
            null("waiting_until", REAL),  # present while waiting in get_messages
            null("client_session"),  # the Claude Code session that registered it
        ),
        key=("name",),
        indexes=(ix("agents_token", "token_hash", unique=True),),
    ),
    Table(
        "tasks",
        (
            col("id", ID),
            col("title"),
            col("description", default=""),
            col("task_type"),
            col("priority", INT),
            col("labels", JSON, default="[]"),
            col("acceptance_criteria", JSON, default="[]"),
            col("status", default="todo"),
            null("assignee"),
            null("reserved_for"),
            null("lease_expires_at", REAL),
            col("fencing_token", INT, default=0),
            col("version", INT, default=1),
            null("blocked_reason"),
            null("summary"),
            null("output"),
            col("created_by"),
            col("created_at", REAL),
            col("updated_at", REAL),
            null("acceptance_tests", JSON),  # the creator's tests, which the claimer cannot change
            null("unverified"),  # why a card that reached done was not verified by its tests
            col("waived", JSON, default="[]"),  # analyser rule ids its creator waived
            null("contest", BIGINT),  # the id of the contest's first card
            null("contest_result"),
            null("approval"),  # why it needs a person's approval (NULL: it does not)
            null("evidence"),
            null("budget_tokens", BIGINT),
            null("budget_noted_at", REAL),
            null("repo"),
            col("paths", JSON, default="[]"),  # the globs it says it will touch
            null("round_limit", INT),
            col("canary", FLAG, default=0),
        ),
        indexes=(
            ix("tasks_claimable", "status", "priority DESC", "id"),
            ix("tasks_lease", "status", "lease_expires_at"),
            ix("tasks_assignee", "assignee", "status"),
            ix("tasks_recent", "status", "updated_at"),
            ix("tasks_contest", "contest", where="contest IS NOT NULL"),
            ix("tasks_by_priority", "priority DESC", "id"),
            # PostgreSQL's planner may walk tasks_by_priority past every done card by its statistics
            # (board/pg_migrations.py p013); SQLite's always takes tasks_claimable
            ix("tasks_todo", "priority DESC", "id", where="status = 'todo'", only=POSTGRESQL),
        ),
        # SQLite keeps the counts per status (task_counts); PostgreSQL counts them (p023_cards_counted_not_kept)
        triggers=(("tasks_counted", SQLITE), ("tasks_recounted", SQLITE), ("tasks_uncounted", SQLITE)),
    ),
    Table(
        "task_deps",
        (col("task_id", BIGINT, ref="tasks"), col("depends_on", BIGINT, ref="tasks")),
        key=("task_id", "depends_on"),
        indexes=(ix("task_deps_rev", "depends_on"),),
    ),
    Table(
        "task_history",
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("at", REAL),
            col("actor"),
            col("action"),
            null("from_status"),
            null("to_status"),
            null("note"),
        ),
        indexes=(ix("task_history_task", "task_id", "id"),),
    ),
    Table(
        "artifacts",
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("fencing_token", INT),
            col("name"),
            col("kind"),
            col("content"),
            col("created_at", REAL),
        ),
        indexes=(ix("artifacts_task", "task_id", "fencing_token"),),
    ),
    Table(
        "messages",
        (
            col("id", ID),
            col("intent"),
            null("task_id", BIGINT, ref="tasks"),
            col("sender"),
            null("recipient"),
            col("thread"),
            null("reply_to", BIGINT, ref="messages"),
            col("summary"),
            col("content"),
            col("priority", INT),
            col("metadata", JSON, default="{}"),
            col("created_at", REAL),
        ),
        indexes=(
            ix("messages_task", "task_id", "id"),
            ix("messages_thread", "thread", "id"),
            ix("messages_intent", "intent", "id"),
            ix("messages_sender", "sender", "id"),
        ),
    ),
    Table(
        "inbox",  # one row per recipient: read and ack state are per agent
        (
            col("agent"),
            col("message_id", BIGINT, ref="messages"),
            null("read_at", REAL),
            null("acked_at", REAL),
        ),
        key=("agent", "message_id"),
        indexes=(
            ix("inbox_unread", "agent", "read_at", "message_id", "acked_at"),
            ix("inbox_message", "message_id"),
        ),
        without_rowid=True,
    ),
    Table(
        "subscriptions",
        (col("agent"), col("kind"), col("value"), col("created_at", REAL)),
        key=("agent", "kind", "value"),
        indexes=(ix("subscriptions_match", "kind", "value"),),
    ),
    Table(
        "memory_items",  # shared memory's source of truth; Chroma is an index rebuilt from it
        (
            col("id", ID),
            col("kind"),
            null("task_type"),
            null("task_id", BIGINT),
            col("title", default=""),
            col("text"),
            col("tags", JSON, default="[]"),
            null("source"),
            col("created_by"),
            col("created_at", REAL),
            col("deprecated", FLAG, default=0),
            null("superseded_by", BIGINT, ref="memory_items"),
            col("merged_count", INT, default=1),
            null("embedding", BYTES),
            null("embedding_model"),
            col("code_words", default=""),  # identifiers' parts, for keyword search
            null("body_embedding", BYTES),
            col("trust", default="unreviewed"),
            null("review_id", BIGINT),
            null("held"),
            col("witnesses", INT, default=1),
            # keyword search: a weighted tsvector of title, text and code_words (SQLite: memory_fts)
            col("search", TSVECTOR, null=True, only=POSTGRESQL),
        ),
        indexes=(
            ix("memory_kind", "kind", "task_type"),
            ix("memory_task", "task_id"),
            ix("memory_kind_id", "kind", "id"),
            ix("memory_items_body_pending", "id", where="body_embedding IS NULL AND embedding IS NOT NULL"),
            ix("memory_search", "search", only=POSTGRESQL),  # GIN
        ),
        triggers=(
            ("memory_items_changed", None),  # memory_revision counts changes to stored items
            ("memory_items_removed", None),
            ("memory_fts_ai", SQLITE),  # memory_fts follows the items
            ("memory_fts_ad", SQLITE),
            ("memory_fts_au", SQLITE),
        ),
    ),
    Table(
        "memory_fts",
        (col("title", null=True), col("text", null=True), col("code_words", null=True)),
        left_behind="SQLite's keyword index, kept by triggers",
        only=SQLITE,
        virtual="fts5",
    ),
    Table(
        "memory_outbox",  # items waiting to be embedded; a worker leases them
        (col("item_id", BIGINT, ref="memory_items"), col("queued_at", REAL), null("leased_until", REAL)),
        key=("item_id",),
        left_behind="every copied item is queued again: the target's vector index has none of them",
    ),
    Table(
        "memory_surfaced",
        (
            col("id", ID),
            col("item_id", BIGINT, ref="memory_items"),
            col("agent"),
            null("task_id", BIGINT),
            col("surfaced_at", REAL),
            null("useful_at", REAL),
        ),
        indexes=(ix("memory_surfaced_task", "task_id", "agent"),),
    ),
    Table(
        "memory_witnesses",  # the distinct authors (or cards) behind a lesson
        (col("item_id", BIGINT), col("witness")),
        key=("item_id", "witness"),
    ),
    Table(
        "memory_revision",  # one row: a count of changes to stored memory items
        (col("one", INT), col("n", BIGINT)),
        key=("one",),
        checks=("one = 1",),
        left_behind="the target's chain made its one row",
    ),
    Table(
        "memory_digests",
        (
            col("task_type"),
            col("title", default=""),
            col("rules", JSON, default="[]"),
            col("lessons", INT, default=0),
            col("accrued", INT, default=0),
            col("written_by", default=""),
            col("version", INT, default=0),
            null("updated_at", REAL),
            null("building_until", REAL),
        ),
        key=("task_type",),
    ),
    Table(
        "card_context",  # a claim's lessons computed ahead
        (
            col("task_id", BIGINT),
            col("model"),
            col("digest"),
            col("vector", BYTES),
            col("hits", JSON),
            col("as_of", BIGINT),
            col("computed_at", REAL),
            null("shown", JSON),
            null("revision", BIGINT),
        ),
        key=("task_id",),
        left_behind=DERIVED,
    ),
    Table(
        "reviews",  # one row per review round: a durable, leased job
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("round", INT),
            col("agent"),
            col("fencing_token", INT),
            col("task_type"),
            col("output"),
            null("summary"),
            col("artifacts", JSON),
            col("status"),
            null("verdict"),
            null("outcome"),
            null("worker"),
            null("leased_until", REAL),
            col("attempts", INT, default=0),
            null("agent_deadline", REAL),
            null("synthesis"),
            col("created_at", REAL),
            null("started_at", REAL),
            null("finished_at", REAL),
            null("traceparent"),
        ),
        checks=("status IN ('queued', 'running', 'finished', 'cancelled')",),
        indexes=(ix("reviews_task", "task_id", "id"), ix("reviews_queue", "status", "id")),
    ),
    Table(
        "critiques",  # every critique of every round, errors and skips included
        (
            col("id", ID),
            col("review_id", BIGINT, ref="reviews"),
            col("task_id", BIGINT),
            col("round", INT),
            col("critic"),
            col("lens"),
            col("backend"),
            null("model"),
            col("status"),
            null("verdict"),
            null("score", INT),
            null("summary"),
            col("issues", JSON, default="[]"),
            col("issue_count", INT, default=0),
            col("resolutions", JSON, default="[]"),
            null("error"),
            null("submitted_by"),
            col("decisive", FLAG, default=0),
            col("followed", FLAG, default=0),
            col("resolved", FLAG, default=0),
            null("started_at", REAL),
            null("finished_at", REAL),
            col("hidden", FLAG, default=0),
        ),
        unique=(("review_id", "critic"),),
        indexes=(ix("critiques_task", "task_id", "round"),),
    ),
    Table(
        "events",  # typed commit events other processes read to wake their waiters; a bounded tail
        (
            col("id", ID),
            col("kind"),
            col("data", JSON),
            # the transaction that wrote it: a node's listener reads back by it what it missed (board/postgres.py)
            col("tx", XID8, default=Expr("pg_current_xact_id()"), only=POSTGRESQL),
        ),
        indexes=(ix("events_by_tx", "tx", only=POSTGRESQL),),
        left_behind="they only wake waiters",
    ),
    Table(
        "quota_usage",  # one row per charged write, with its series' running totals
        (
            col("agent"),
            col("kind"),
            col("at", REAL),
            col("total_units", BIGINT),
            col("total_chars", BIGINT),
            col("units", INT),
            col("chars", BIGINT),
        ),
        key=("agent", "kind", "at", "total_units"),
        left_behind="pruned an hour after it is written",
        without_rowid=True,
        include=("total_chars", "units", "chars"),
    ),
    Table(
        "web_sessions",  # a person's login on the web board
        (
            col("id_hash"),
            col("agent"),
            col("token_hash"),
            col("created_at", REAL),
            col("expires_at", REAL),
            null("revoked_at", REAL),
        ),
        key=("id_hash",),
        indexes=(ix("web_sessions_expiry", "expires_at"),),
        left_behind="a person logs in to the new board again",
        without_rowid=True,
    ),
    Table(
        "token_usage",
        (
            col("id", ID),
            col("agent"),
            null("task_id", BIGINT),
            col("session_id", default=""),
            col("model", default=""),
            col("input_tokens", BIGINT, default=0),
            col("output_tokens", BIGINT, default=0),
            col("cache_creation_tokens", BIGINT, default=0),
            col("cache_read_tokens", BIGINT, default=0),
            col("messages", BIGINT, default=0),
            col("recorded_at", REAL),
        ),
        indexes=(ix("token_usage_task", "task_id"), ix("token_usage_agent", "agent")),
    ),
    Table(
        "mcp_tasks",  # MCP Tasks: long calls run in the background, answered from any node
        (
            col("id"),
            col("agent"),
            col("tool"),
            col("status"),
            null("status_message"),
            null("result", JSON),
            null("error", JSON),
            col("created_at", REAL),
            col("updated_at", REAL),
            col("expires_at", REAL),
            col("runner_until", REAL),
            col("cancel_requested", FLAG, default=0),
        ),
        key=("id",),
        indexes=(ix("mcp_tasks_expiry", "expires_at"),),
        left_behind="a running call belongs to the node that ran it",
    ),
    Table(
        "repos",
        (
            col("name"),
            col("path"),
            col("git_dir"),
            col("base"),
            null("test_command"),
            col("merge_mode", default="auto"),
            col("created_by"),
            col("created_at", REAL),
            null("moved_to"),  # the tip found on the base instead, while merging into it is stopped
        ),
        key=("name",),
    ),
    Table(
        "worktrees",
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("agent"),
            col("repo"),
            col("path"),
            col("branch"),
            col("base_sha"),
            col("created_at", REAL),
            null("removed_at", REAL),
        ),
        indexes=(ix("worktrees_live", "task_id", "agent", where="removed_at IS NULL"),),
    ),
    Table(
        "task_refs",  # each round handed in as a commit
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("fencing_token", INT),
            col("repo"),
            col("ref"),
            col("sha"),
            col("base_sha"),
            col("files", JSON, default="[]"),
            col("diff", default=""),
            col("created_at", REAL),
        ),
        indexes=(ix("task_refs_task", "task_id", "id"),),
    ),
    Table(
        "merges",  # the merge queue
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("repo"),
            col("sha"),
            col("status", default="queued"),
            null("worker"),
            null("leased_until", REAL),
            col("attempts", INT, default=0),
            null("merged_sha"),
            null("note"),
            col("created_at", REAL),
            null("finished_at", REAL),
        ),
        indexes=(ix("merges_queue", "repo", "status", "id"),),
    ),
    Table(
        "reservations",  # an agent's glob in a scope, live while unreleased, unexpired and its card held
        (
            col("id", ID),
            col("scope", default=""),
            col("agent"),
            null("task_id", BIGINT, ref="tasks"),
            col("pattern"),
            col("exclusive", FLAG, default=1),
            null("reason"),
            col("created_at", REAL),
            col("expires_at", REAL),
            null("released_at", REAL),
        ),
        indexes=(
            ix("reservations_live", "expires_at", where="released_at IS NULL"),
            ix("reservations_held", "scope", "agent", "pattern", unique=True, where="released_at IS NULL"),
            ix("reservations_task", "task_id", where="released_at IS NULL"),
        ),
    ),
    Table(
        "repo_landings",  # every commit hiveboard put on a repository's base, and people's decisions about it
        (
            col("id", ID),
            col("repo"),
            col("sha"),
            col("how"),
            col("actor"),
            null("task_id", BIGINT),
            null("note"),
            col("created_at", REAL),
        ),
        indexes=(ix("repo_landings_repo", "repo", "id"),),
    ),
    Table(
        "flags",  # an agent's honest way out of a card, and a person's answer
        (
            col("id", ID),
            col("task_id", BIGINT, ref="tasks"),
            col("agent"),
            col("kind"),
            col("reason"),
            col("fencing_token", INT),
            col("at", REAL),
            null("answer"),
            null("answered_by"),
            null("answered_at", REAL),
            null("note"),
        ),
        indexes=(ix("flags_by_task", "task_id"),),
    ),
    Table(
        "task_counts",  # how many cards each column holds, kept by triggers on tasks (SQLite, whose writer is alone)
        (col("status"), col("n", BIGINT)),
        key=("status",),
        left_behind="the target's triggers count the cards as they are copied",
        only=SQLITE,
    ),
    Table(
        "channel_pushes",  # what the channel told each agent, so that no session is told twice
        (col("agent"), col("item"), col("pushed_at", REAL)),
        key=("agent", "item"),
    ),
)


def table(name: str) -> Table:
    """The declared table `name`; KeyError names the tables when there is none."""
    for t in TABLES:
        if t.name == name:
            return t
    raise KeyError(f"no table {name!r} is declared in board/schema.py; tables: {', '.join(t.name for t in TABLES)}")


def tables_in(dialect: str) -> tuple[Table, ...]:
    return tuple(t for t in TABLES if t.only in (None, dialect))


COPIED: tuple[Table, ...] = tuple(t for t in TABLES if t.left_behind is None)
