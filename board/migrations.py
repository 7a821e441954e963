"""Schema changes as small named functions, applied in order and recorded in `migrations`.

Add a migration by appending a function to MIGRATIONS, the same change to board/pg_migrations.py, and the
table or column to the declaration in board/schema.py (tests/board/test_schema.py fails until the three agree);
never edit one that has shipped. A migration is frozen SQL and data: it imports no live code of the board, whose
later changes would change what an old migration does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ._sqlite_utils import Database


def m001_tasks(db: Database) -> None:
    db.execute("""
        CREATE TABLE tasks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            task_type TEXT NOT NULL,
            priority INTEGER NOT NULL,
            labels TEXT NOT NULL DEFAULT '[]',
            acceptance_criteria TEXT NOT NULL DEFAULT '[]',
            status TEXT NOT NULL DEFAULT 'todo',
            assignee TEXT,
            reserved_for TEXT,
            lease_expires_at REAL,
            fencing_token INTEGER NOT NULL DEFAULT 0,
            version INTEGER NOT NULL DEFAULT 1,
            blocked_reason TEXT,
            summary TEXT,
            output TEXT,
            created_by TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX tasks_claimable ON tasks (status, priority DESC, id)")
    db.execute("CREATE INDEX tasks_lease ON tasks (status, lease_expires_at)")
    db.execute("CREATE INDEX tasks_assignee ON tasks (assignee, status)")
    db.execute("CREATE INDEX tasks_recent ON tasks (status, updated_at)")  # get_board's done column
    db.execute("""
        CREATE TABLE task_deps (
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            depends_on INTEGER NOT NULL REFERENCES tasks(id),
            PRIMARY KEY (task_id, depends_on)
        )""")
    db.execute("CREATE INDEX task_deps_rev ON task_deps (depends_on)")
    db.execute("""
        CREATE TABLE task_history (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            at REAL NOT NULL,
            actor TEXT NOT NULL,
            action TEXT NOT NULL,
            from_status TEXT,
            to_status TEXT,
            note TEXT
        )""")
    db.execute("CREATE INDEX task_history_task ON task_history (task_id, id)")
    db.execute("""
        CREATE TABLE artifacts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            fencing_token INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            content TEXT NOT NULL,
            created_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX artifacts_task ON artifacts (task_id, fencing_token)")


def m002_agents(db: Database) -> None:
    db.execute("""
        CREATE TABLE agents (
            name TEXT PRIMARY KEY,
            role TEXT,
            token_hash TEXT,
            created_at REAL NOT NULL,
            last_seen_at REAL
        )""")
    db.execute("CREATE UNIQUE INDEX agents_token ON agents (token_hash)")


def m003_messages(db: Database) -> None:
    db.execute("""
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            intent TEXT NOT NULL,
            task_id INTEGER REFERENCES tasks(id),
            sender TEXT NOT NULL,
            recipient TEXT,
            thread TEXT NOT NULL,
            reply_to INTEGER REFERENCES messages(id),
            summary TEXT NOT NULL,
            content TEXT NOT NULL,
            priority INTEGER NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX messages_task ON messages (task_id, id)")
    db.execute("CREATE INDEX messages_thread ON messages (thread, id)")
    db.execute("CREATE INDEX messages_intent ON messages (intent, id)")
    db.execute("CREATE INDEX messages_sender ON messages (sender, id)")
    # One row per recipient: the message is stored once, read/ack state is per agent.
    db.execute("""
        CREATE TABLE inbox (
            agent TEXT NOT NULL,
            message_id INTEGER NOT NULL REFERENCES messages(id),
            read_at REAL,
            acked_at REAL,
            PRIMARY KEY (agent, message_id)
        ) WITHOUT ROWID""")
    db.execute("CREATE INDEX inbox_unread ON inbox (agent, read_at, message_id, acked_at)")  # covers the fetch
    db.execute("CREATE INDEX inbox_message ON inbox (message_id)")  # who got what: cross-process wake-ups
    db.execute("""
        CREATE TABLE subscriptions (
            agent TEXT NOT NULL,
            kind TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (agent, kind, value)
        )""")
    db.execute("CREATE INDEX subscriptions_match ON subscriptions (kind, value)")


def m004_memory(db: Database) -> None:
    # The source of truth for shared memory; Chroma is an index rebuilt from here (hiveboard reindex).
    db.execute("""
        CREATE TABLE memory_items (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL,
            task_type TEXT,
            task_id INTEGER,
            title TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL,
            tags TEXT NOT NULL DEFAULT '[]',
            source TEXT,
            created_by TEXT NOT NULL,
            created_at REAL NOT NULL,
            deprecated INTEGER NOT NULL DEFAULT 0,
            superseded_by INTEGER REFERENCES memory_items(id),
            merged_count INTEGER NOT NULL DEFAULT 1,
            embedding BLOB,
            embedding_model TEXT
        )""")
    db.execute("CREATE INDEX memory_kind ON memory_items (kind, task_type)")
    db.execute("CREATE INDEX memory_task ON memory_items (task_id)")
    db.execute(
        "CREATE VIRTUAL TABLE memory_fts USING fts5(title, text, content='memory_items', content_rowid='id', "
        "tokenize='porter unicode61')"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_items BEGIN "
        "INSERT INTO memory_fts (rowid, title, text) VALUES (new.id, new.title, new.text); END"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_items BEGIN "
        "INSERT INTO memory_fts (memory_fts, rowid, title, text) VALUES ('delete', old.id, old.title, old.text); "
        "END"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_au AFTER UPDATE OF title, text ON memory_items BEGIN "
        "INSERT INTO memory_fts (memory_fts, rowid, title, text) VALUES ('delete', old.id, old.title, old.text); "
        "INSERT INTO memory_fts (rowid, title, text) VALUES (new.id, new.title, new.text); END"
    )
    # Items waiting to be embedded and indexed; a worker leases them, so a crash only delays them.
    db.execute("""
        CREATE TABLE memory_outbox (
            item_id INTEGER PRIMARY KEY REFERENCES memory_items(id),
            queued_at REAL NOT NULL,
            leased_until REAL
        )""")
    db.execute("""
        CREATE TABLE memory_surfaced (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            item_id INTEGER NOT NULL REFERENCES memory_items(id),
            agent TEXT NOT NULL,
            task_id INTEGER,
            surfaced_at REAL NOT NULL,
            useful_at REAL
        )""")
    db.execute("CREATE INDEX memory_surfaced_task ON memory_surfaced (task_id, agent)")


def m006_reviews(db: Database) -> None:
    # One row per review round: a durable job (queued → running → finished) holding a snapshot of the
    # work it reviews, leased by one worker at a time so a dead worker's job is picked up again.
    db.execute("""
        CREATE TABLE reviews (
            id INTEGER PRIMARY KEY,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            round INTEGER NOT NULL,
            agent TEXT NOT NULL,
            fencing_token INTEGER NOT NULL,
            task_type TEXT NOT NULL,
            output TEXT NOT NULL,
            summary TEXT,
            artifacts TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'finished')),
            verdict TEXT,
            outcome TEXT,
            worker TEXT,
            leased_until REAL,
            attempts INTEGER NOT NULL DEFAULT 0,
            agent_deadline REAL,
            synthesis TEXT,
            created_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL
        )""")
    db.execute("CREATE INDEX reviews_task ON reviews (task_id, id)")
    db.execute("CREATE INDEX reviews_queue ON reviews (status, id)")
    # Every critique of every round, including critics that errored, timed out, were skipped, or (agent
    # slots) were never taken: nothing is silently dropped.
    db.execute("""
        CREATE TABLE critiques (
            id INTEGER PRIMARY KEY,
            review_id INTEGER NOT NULL REFERENCES reviews(id),
            task_id INTEGER NOT NULL,
            round INTEGER NOT NULL,
            critic TEXT NOT NULL,
            lens TEXT NOT NULL,
            backend TEXT NOT NULL,
            model TEXT,
            status TEXT NOT NULL,
            verdict TEXT,
            score INTEGER,
            summary TEXT,
            issues TEXT NOT NULL DEFAULT '[]',
            issue_count INTEGER NOT NULL DEFAULT 0,
            resolutions TEXT NOT NULL DEFAULT '[]',
            error TEXT,
            submitted_by TEXT,
            decisive INTEGER NOT NULL DEFAULT 0,
            followed INTEGER NOT NULL DEFAULT 0,
            resolved INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            finished_at REAL,
            UNIQUE (review_id, critic)
        )""")
    db.execute("CREATE INDEX critiques_task ON critiques (task_id, round)")


def m007_acceptance_tests(db: Database) -> None:
    # The creator's acceptance tests (JSON), which the claimer cannot change, and why a card that reached
    # done was not verified by running its tests.
    db.execute("ALTER TABLE tasks ADD COLUMN acceptance_tests TEXT")
    db.execute("ALTER TABLE tasks ADD COLUMN unverified TEXT")


def m008_events(db: Database) -> None:
    # Typed commit events (board/events.py), read by other processes' watchers to wake their waiters;
    # a bounded tail is kept.
    db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, data TEXT NOT NULL)")


def m009_review_cancelled(db: Database) -> None:
    # A review job can be cancelled (its card left review by another path). Widening a CHECK leaves every
    # stored row valid, so this is SQLite's documented in-place schema edit rather than a table rebuild
    # (a rebuild of `reviews` would trip the foreign keys of `critiques`).
    version = db.execute("PRAGMA schema_version").fetchone()[0]
    db.execute("PRAGMA writable_schema = ON")
    db.execute(
        "UPDATE sqlite_master SET sql = replace(sql, \"CHECK (status IN ('queued', 'running', 'finished'))\", "
        "\"CHECK (status IN ('queued', 'running', 'finished', 'cancelled'))\") WHERE type = 'table' AND "
        "name = 'reviews'"
    )
    db.execute(f"PRAGMA schema_version = {version + 1}")
    db.execute("PRAGMA writable_schema = OFF")


def m010_agent_presence(db: Database) -> None:
    # An agent waiting in get_messages is present until its wait ends (reviews ask only present critics).
    db.execute("ALTER TABLE agents ADD COLUMN waiting_until REAL")


def m011_waivers(db: Database) -> None:
    # Analyser rule ids the card's creator waived for it (JSON list).
    db.execute("ALTER TABLE tasks ADD COLUMN waived TEXT NOT NULL DEFAULT '[]'")


def m012_contests(db: Database) -> None:
    # Competing attempts: each attempt is a card whose `contest` is the id of the contest's first card;
    # the referee's decision is kept on every attempt.
    db.execute("ALTER TABLE tasks ADD COLUMN contest INTEGER")
    db.execute("ALTER TABLE tasks ADD COLUMN contest_result TEXT")
    db.execute("CREATE INDEX tasks_contest ON tasks (contest) WHERE contest IS NOT NULL")


_CAMEL_M013 = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")


def _code_words_m013(title: str, text: str) -> str:
    """board/knowledge.py's code_words as m013 shipped it (frozen here with the migration)."""
    parts: list[str] = []
    for word in dict.fromkeys(re.findall(r"[^\W_]+", f"{title} {text}")):
        if not word.islower() or any(c.isdigit() for c in word):
            split = [p.lower() for p in _CAMEL_M013.findall(word)]
            parts += split if len(split) > 1 else []
    return " ".join(parts)


def m013_code_words(db: Database) -> None:
    # Keyword search sees inside identifiers: each item keeps the parts of its camelCase and digit-joined
    # identifiers (board/knowledge.py code_words) in a column the FTS5 index holds beside title and text.
    # An external-content FTS5 table cannot gain a column: it is made again and rebuilt from the items.
    # The backfill uses the splitting as it was when this migration shipped (_code_words_m013), not the
    # live function: a migration must do the same thing on every database, whenever it runs.
    code_words = _code_words_m013

    db.execute("ALTER TABLE memory_items ADD COLUMN code_words TEXT NOT NULL DEFAULT ''")
    rows = db.execute("SELECT id, title, text FROM memory_items").fetchall()
    db.conn.executemany(
        "UPDATE memory_items SET code_words = ? WHERE id = ?",
        [(code_words(title, text), item_id) for item_id, title, text in rows],
    )
    for trigger in ("memory_fts_ai", "memory_fts_ad", "memory_fts_au"):
        db.execute(f"DROP TRIGGER {trigger}")
    db.execute("DROP TABLE memory_fts")
    db.execute(
        "CREATE VIRTUAL TABLE memory_fts USING fts5(title, text, code_words, content='memory_items', "
        "content_rowid='id', tokenize='porter unicode61')"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_ai AFTER INSERT ON memory_items BEGIN "
        "INSERT INTO memory_fts (rowid, title, text, code_words) VALUES (new.id, new.title, new.text, "
        "new.code_words); END"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_ad AFTER DELETE ON memory_items BEGIN "
        "INSERT INTO memory_fts (memory_fts, rowid, title, text, code_words) "
        "VALUES ('delete', old.id, old.title, old.text, old.code_words); END"
    )
    db.execute(
        "CREATE TRIGGER memory_fts_au AFTER UPDATE OF title, text, code_words ON memory_items BEGIN "
        "INSERT INTO memory_fts (memory_fts, rowid, title, text, code_words) "
        "VALUES ('delete', old.id, old.title, old.text, old.code_words); "
        "INSERT INTO memory_fts (rowid, title, text, code_words) VALUES (new.id, new.title, new.text, "
        "new.code_words); END"
    )
    db.execute("INSERT INTO memory_fts (memory_fts) VALUES ('rebuild')")


def m014_digests(db: Database) -> None:
    # One digest per task type: its lessons grouped by meaning into a few rules with counts (memory/digests.py).
    # `accrued` is how many lessons (merged duplicates counted) the task type had when it was built, so a
    # rebuild waits until enough new ones came in; `building_until` leases a rebuild to one process.
    db.execute("""
        CREATE TABLE memory_digests (
            task_type TEXT PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            rules TEXT NOT NULL DEFAULT '[]',
            lessons INTEGER NOT NULL DEFAULT 0,
            accrued INTEGER NOT NULL DEFAULT 0,
            written_by TEXT NOT NULL DEFAULT '',
            version INTEGER NOT NULL DEFAULT 0,
            updated_at REAL,
            building_until REAL
        )""")


def m015_tasks_by_priority(db: Database) -> None:
    # list_tasks without a status filter pages the whole board by priority: without this index SQLite
    # sorted every card for each page of 20
    db.execute("CREATE INDEX tasks_by_priority ON tasks (priority DESC, id)")


def m016_approval_and_evidence(db: Database) -> None:
    # Whether a card needs a person's approval is decided when it is made and kept as why ("label release",
    # "task type code", "asked by its creator"), so a later label edit cannot take it away; and how a passing
    # acceptance check was established when only weak evidence exists.
    db.execute("ALTER TABLE tasks ADD COLUMN approval TEXT")
    db.execute("ALTER TABLE tasks ADD COLUMN evidence TEXT")


def m017_quotas(db: Database) -> None:
    # One row per charged write of an agent (board/quotas.py), with the running totals of its series (agent,
    # kind): a window's usage is two lookups on the key, in time order; rows are pruned an hour after they were
    # written. The total of calls grows with every row, so it keeps two rows of one moment apart.
    db.execute("""
        CREATE TABLE quota_usage (
            agent TEXT NOT NULL,
            kind TEXT NOT NULL,
            at REAL NOT NULL,
            total_units INTEGER NOT NULL,
            total_chars INTEGER NOT NULL,
            units INTEGER NOT NULL,
            chars INTEGER NOT NULL,
            PRIMARY KEY (agent, kind, at, total_units)
        ) WITHOUT ROWID""")


def m018_web_sessions(db: Database) -> None:
    # A person's login on the web board (board/web_sessions.py), in the database so that every process and node
    # sees a logout, a replaced token or an expiry. The browser keeps a random id; this keeps its SHA-256, and
    # the token hash it was opened with, so a new token ends it. Rows are pruned once they expire.
    db.execute("""
        CREATE TABLE web_sessions (
            id_hash TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            token_hash TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            revoked_at REAL
        ) WITHOUT ROWID""")
    db.execute("CREATE INDEX web_sessions_expiry ON web_sessions (expires_at)")


def m019_token_usage(db: Database) -> None:
    # What agents' sessions cost, read from their clients' transcripts by `hiveboard hook stop|session-end`
    # (server/hook.py): tokens of one model, summed over a stretch of a session, against the card the agent held
    # while it spent them (NULL: no card). `message_ids` of the last rows keep a transcript from being counted twice.
    db.execute("""
        CREATE TABLE token_usage (
            id INTEGER PRIMARY KEY,
            agent TEXT NOT NULL,
            task_id INTEGER,
            session_id TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            messages INTEGER NOT NULL DEFAULT 0,
            recorded_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX token_usage_task ON token_usage (task_id)")
    db.execute("CREATE INDEX token_usage_agent ON token_usage (agent)")


def m020_card_context(db: Database) -> None:
    # The lessons a claim hands out, computed ahead in the background when a card is created or changed
    # (memory/service.py `Memory.prepare`): the card's vector, the hits, and the newest lesson or critique they
    # saw (as_of). A claim reads them when nothing newer came since; derived data, so `migrate` leaves it behind.
    db.execute("""
        CREATE TABLE card_context (
            task_id INTEGER PRIMARY KEY,
            model TEXT NOT NULL,
            digest TEXT NOT NULL,
            vector BLOB NOT NULL,
            hits TEXT NOT NULL,
            as_of INTEGER NOT NULL,
            computed_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX memory_kind_id ON memory_items (kind, id)")


def m021_mcp_tasks(db: Database) -> None:
    # MCP Tasks (io.modelcontextprotocol/tasks): a long call (wait_for_work, a wait for messages or a verdict) run
    # in the background for a client that declared the extension; its handle answers tasks/get from any node.
    # runner_until: the running node's lease (it renews it); past it, nobody runs the task any more.
    db.execute("""
        CREATE TABLE mcp_tasks (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            tool TEXT NOT NULL,
            status TEXT NOT NULL,
            status_message TEXT,
            result TEXT,
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            runner_until REAL NOT NULL,
            cancel_requested INTEGER NOT NULL DEFAULT 0
        )""")
    db.execute("CREATE INDEX mcp_tasks_expiry ON mcp_tasks (expires_at)")


def m022_card_budget(db: Database) -> None:
    # A card's token budget (create_task budget_tokens; NULL: none), and when its recorded usage was first found
    # to reach it (board/usage.py): noted once, so its creator is told once.
    db.execute("ALTER TABLE tasks ADD COLUMN budget_tokens INTEGER")
    db.execute("ALTER TABLE tasks ADD COLUMN budget_noted_at REAL")


def m023_body_embedding(db: Database) -> None:
    # An item's second vector: its content alone, when the first reads it under a title or a lesson's frame
    # (memory/service.py `body_text`); an item scores the better of the two. NULL: not decided yet (items indexed
    # before this column, filled in the background); an empty value: the item has no second reading.
    db.execute("ALTER TABLE memory_items ADD COLUMN body_embedding BLOB")
    db.execute(
        "CREATE INDEX memory_items_body_pending ON memory_items (id) "
        "WHERE body_embedding IS NULL AND embedding IS NOT NULL"
    )


def m024_repositories(db: Database) -> None:
    # Git repositories cards are worked in (issue 23): the registry, a card's repository, the worktrees given at
    # claim, each round handed in as a commit, and the merge queue.
    db.execute("""
        CREATE TABLE repos (
            name TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            git_dir TEXT NOT NULL,
            base TEXT NOT NULL,
            test_command TEXT,
            merge_mode TEXT NOT NULL DEFAULT 'auto',
            created_by TEXT NOT NULL,
            created_at REAL NOT NULL
        )""")
    db.execute("ALTER TABLE tasks ADD COLUMN repo TEXT")
    db.execute("""
        CREATE TABLE worktrees (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            agent TEXT NOT NULL,
            repo TEXT NOT NULL,
            path TEXT NOT NULL,
            branch TEXT NOT NULL,
            base_sha TEXT NOT NULL,
            created_at REAL NOT NULL,
            removed_at REAL
        )""")
    db.execute("CREATE INDEX worktrees_live ON worktrees (task_id, agent) WHERE removed_at IS NULL")
    db.execute("""
        CREATE TABLE task_refs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            fencing_token INTEGER NOT NULL,
            repo TEXT NOT NULL,
            ref TEXT NOT NULL,
            sha TEXT NOT NULL,
            base_sha TEXT NOT NULL,
            files TEXT NOT NULL DEFAULT '[]',
            diff TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX task_refs_task ON task_refs (task_id, id)")
    db.execute("""
        CREATE TABLE merges (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            repo TEXT NOT NULL,
            sha TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'queued',
            worker TEXT,
            leased_until REAL,
            attempts INTEGER NOT NULL DEFAULT 0,
            merged_sha TEXT,
            note TEXT,
            created_at REAL NOT NULL,
            finished_at REAL
        )""")
    db.execute("CREATE INDEX merges_queue ON merges (repo, status, id)")


def m025_reservations(db: Database) -> None:
    # Path reservations (board/reservations.py): an agent's glob in a scope (a repository's name, '' for the board),
    # tied to a card (task_id) or not; live while not released, not expired and its card still held. The partial
    # indexes keep the live ones quick to read, one unreleased row per (scope, agent, pattern), and a card's own
    # quick to release. tasks.paths: the globs a card says it will touch (a JSON list).
    db.execute("""
        CREATE TABLE reservations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            scope TEXT NOT NULL DEFAULT '',
            agent TEXT NOT NULL,
            task_id INTEGER REFERENCES tasks(id),
            pattern TEXT NOT NULL,
            exclusive INTEGER NOT NULL DEFAULT 1,
            reason TEXT,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            released_at REAL
        )""")
    db.execute("CREATE INDEX reservations_live ON reservations (expires_at) WHERE released_at IS NULL")
    db.execute(
        "CREATE UNIQUE INDEX reservations_held ON reservations (scope, agent, pattern) WHERE released_at IS NULL"
    )
    db.execute("CREATE INDEX reservations_task ON reservations (task_id) WHERE released_at IS NULL")
    db.execute("ALTER TABLE tasks ADD COLUMN paths TEXT NOT NULL DEFAULT '[]'")


def m026_keyword_merges_in_the_background(db: Database) -> None:
    # FTS5 writes each transaction's words as a new segment and, by default, merges segments inside the writes
    # that add them (automerge): a pool message then paid, at random, for merging earlier items' segments, which
    # made busy agents' pool messages clearly slower than direct ones (bench/README.md). Writes now only add
    # segments; the memory's indexing worker merges them in small steps (`Dialect.merge_keywords`). Past 64
    # segments on one level a write merges them itself (crisismerge): a board nobody serves, or a bulk import,
    # keeps its keyword searches quick. Both settings live in memory_fts's own config table.
    db.execute("INSERT INTO memory_fts (memory_fts, rank) VALUES ('automerge', 0)")
    db.execute("INSERT INTO memory_fts (memory_fts, rank) VALUES ('crisismerge', 64)")


def m027_memory_revision(db: Database) -> None:
    # A count of changes to memory items already stored (a lesson merged into, superseded, deprecated, edited or
    # removed; not its vectors, which the indexer rewrites), kept by triggers so that no path that changes an item
    # can miss it. card_context keeps the hits as a claim hands them (`shown`) and the count they were read at
    # (`revision`): while no item changed since, a claim hands them as they are, without reading the items again
    # (Memory.lessons_ahead).
    db.execute("CREATE TABLE memory_revision (one INTEGER PRIMARY KEY CHECK (one = 1), n INTEGER NOT NULL)")
    db.execute("INSERT INTO memory_revision (one, n) VALUES (1, 0)")
    db.execute(
        "CREATE TRIGGER memory_items_changed AFTER UPDATE OF kind, task_type, task_id, title, text, tags, source, "
        "created_at, deprecated, superseded_by, merged_count ON memory_items BEGIN UPDATE memory_revision SET n = n + 1; END"
    )
    db.execute(
        "CREATE TRIGGER memory_items_removed AFTER DELETE ON memory_items BEGIN UPDATE memory_revision SET n = n + 1; END"
    )
    db.execute("ALTER TABLE card_context ADD COLUMN shown TEXT")
    db.execute("ALTER TABLE card_context ADD COLUMN revision INTEGER")


def m028_task_counts(db: Database) -> None:
    # How many cards each column holds, kept by triggers so that no path that adds, moves or removes a card can
    # miss it: get_board and a list_tasks filtered by no more than a status read a row or a few instead of counting
    # every card (on PostgreSQL that count was most of a get_board's time on a large board, and grows with it).
    db.execute("CREATE TABLE task_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    db.execute("INSERT INTO task_counts (status, n) SELECT status, count(*) FROM tasks GROUP BY status")
    counted = "INSERT INTO task_counts (status, n) VALUES (NEW.status, 1) ON CONFLICT (status) DO UPDATE SET n = n + 1"
    uncounted = "UPDATE task_counts SET n = n - 1 WHERE status = OLD.status"
    db.execute(f"CREATE TRIGGER tasks_counted AFTER INSERT ON tasks BEGIN {counted}; END")
    db.execute(
        "CREATE TRIGGER tasks_recounted AFTER UPDATE OF status ON tasks WHEN OLD.status != NEW.status "
        f"BEGIN {uncounted}; {counted}; END"
    )
    db.execute(f"CREATE TRIGGER tasks_uncounted AFTER DELETE ON tasks BEGIN {uncounted}; END")


def m029_repo_landings(db: Database) -> None:
    # The base branch is the merge queue's (board/merges.py): every commit hiveboard put on a repository's base, the
    # tip it found there at registration, and what a person decided when the base had moved outside the queue
    # (adopted as reviewed, or reset to the recorded tip), with who. A repository's latest row is where hiveboard
    # left its base. repos.moved_to: the tip found there instead, while merging into it is stopped.
    db.execute("""
        CREATE TABLE repo_landings (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            repo TEXT NOT NULL,
            sha TEXT NOT NULL,
            how TEXT NOT NULL,
            actor TEXT NOT NULL,
            task_id INTEGER,
            note TEXT,
            created_at REAL NOT NULL
        )""")
    db.execute("CREATE INDEX repo_landings_repo ON repo_landings (repo, id)")
    db.execute("ALTER TABLE repos ADD COLUMN moved_to TEXT")


def m030_review_round_limit(db: Database) -> None:
    # Review rounds bound the card, not one claim of it, so no path back to todo hands out a fresh set of rounds:
    # the last round whose FAIL goes back to the author, when its creator or a person granted more rounds than
    # review.max_rounds (Reviews.grant_rounds; NULL: none granted).
    db.execute("ALTER TABLE tasks ADD COLUMN round_limit INTEGER")


def m031_critique_hidden(db: Database) -> None:
    # A critique the card's hidden tests shaped (review_models.sealed): its detail is its creator's and people's.
    db.execute("ALTER TABLE critiques ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0")


def m032_review_traceparent(db: Database) -> None:
    # the W3C traceparent of the call that queued the review, so the review's span joins that trace (board/tracing.py)
    db.execute("ALTER TABLE reviews ADD COLUMN traceparent TEXT")


def m033_memory_provenance(db: Database) -> None:
    # Issue 48: who an item came from is stamped by the server. `trust` is reviewed (a passed review, a decided
    # round's critique, a person), unreviewed (an agent) or imported (a memory file); only reviewed items are handed
    # without being asked for. `review_id` is the round an item came from. `held` is why an item that reads like an
    # instruction was held back for a person (NULL: not held). `witnesses` counts the distinct authors (and, for
    # lessons the review mined, cards) behind a lesson: a digest weighs a rule by them, not by copies.
    for column in (
        "trust TEXT NOT NULL DEFAULT 'unreviewed'",
        "review_id INTEGER",
        "held TEXT",
        "witnesses INTEGER NOT NULL DEFAULT 1",
    ):
        db.execute(f"ALTER TABLE memory_items ADD COLUMN {column}")
    db.execute(MEMORY_TRUST_BACKFILL)
    db.execute(
        "CREATE TABLE memory_witnesses (item_id INTEGER NOT NULL, witness TEXT NOT NULL, PRIMARY KEY (item_id, witness))"
    )
    db.execute(MEMORY_WITNESS_BACKFILL)
    db.execute("DELETE FROM card_context")  # lessons computed ahead were chosen without trust: choose them again
    db.execute("DROP TRIGGER memory_items_changed")
    db.execute(
        "CREATE TRIGGER memory_items_changed AFTER UPDATE OF kind, task_type, task_id, title, text, tags, source, "
        "created_at, deprecated, superseded_by, merged_count, trust, held, witnesses ON memory_items "
        "BEGIN UPDATE memory_revision SET n = n + 1; END"
    )


def m035_client_sessions_and_channel_pushes(db: Database) -> None:
    # Issue 49: an agent a Claude Code session registered keeps that session's id (the Agents page shows it, and
    # another session cannot take the name), and each item the channel pushed to an agent is kept once, so a
    # reconnecting session is not told twice.
    db.execute("ALTER TABLE agents ADD COLUMN client_session TEXT")
    db.execute(
        "CREATE TABLE channel_pushes (agent TEXT NOT NULL, item TEXT NOT NULL, pushed_at REAL NOT NULL, "
        "PRIMARY KEY (agent, item))"
    )


# Items written before provenance was kept: the review's own lessons and every critique came from review rounds.
MEMORY_TRUST_BACKFILL = (
    "UPDATE memory_items SET trust = 'reviewed', review_id = CAST(substr(source, 8, instr(substr(source, 8) || ':', ':') - 1) "
    "AS INTEGER) WHERE source LIKE 'review:%'"
)
MEMORY_WITNESS_BACKFILL = (
    "INSERT INTO memory_witnesses (item_id, witness) SELECT id, CASE WHEN created_by = 'review' THEN "
    "'card:' || coalesce(task_id, id) ELSE created_by END FROM memory_items WHERE kind = 'lesson'"
)


def m034_flags_and_canaries(db: Database) -> None:
    # Issue 51: an agent's honest way out of a card it cannot do as written (flag_task), and canary cards whose hidden
    # tests contradict their criteria. `flags`: who flagged which card, of which kind, why, and a person's answer
    # (NULL until answered). `tasks.canary`: read only by the board's honesty figures and the review's outcome; no
    # answer, page or memory item an agent reads carries it (board/canaries.py).
    db.execute("""
        CREATE TABLE flags (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id INTEGER NOT NULL REFERENCES tasks(id),
            agent TEXT NOT NULL,
            kind TEXT NOT NULL,
            reason TEXT NOT NULL,
            fencing_token INTEGER NOT NULL,
            at REAL NOT NULL,
            answer TEXT,
            answered_by TEXT,
            answered_at REAL,
            note TEXT
        )""")
    db.execute("CREATE INDEX flags_by_task ON flags (task_id)")
    db.execute("ALTER TABLE tasks ADD COLUMN canary INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: list[Callable[[Database], None]] = [
    m001_tasks,
    m002_agents,
    m003_messages,
    m004_memory,
    m006_reviews,
    m007_acceptance_tests,
    m008_events,
    m009_review_cancelled,
    m010_agent_presence,
    m011_waivers,
    m012_contests,
    m013_code_words,
    m014_digests,
    m015_tasks_by_priority,
    m016_approval_and_evidence,
    m017_quotas,
    m018_web_sessions,
    m019_token_usage,
    m020_card_context,
    m021_mcp_tasks,
    m022_card_budget,
    m023_body_embedding,
    m024_repositories,
    m025_reservations,
    m026_keyword_merges_in_the_background,
    m027_memory_revision,
    m028_task_counts,
    m029_repo_landings,
    m030_review_round_limit,
    m031_critique_hidden,
    m032_review_traceparent,
    m033_memory_provenance,
    m034_flags_and_canaries,
    m035_client_sessions_and_channel_pushes,
]


def apply_migrations(db: Database) -> list[str]:
    """Apply the migrations this database lacks; call inside a write transaction."""
    db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {row[0] for row in db.execute("SELECT name FROM migrations").fetchall()}
    applied = []
    for migration in MIGRATIONS:
        if migration.__name__ not in done:
            migration(db)
            db.execute("INSERT INTO migrations (name, applied_at) VALUES (?, datetime('now'))", [migration.__name__])
            applied.append(migration.__name__)
    return applied
