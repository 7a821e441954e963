"""Synthetic but realistic shared-memory items for bench_memory.py: lessons, critiques, outputs, messages.

Each PATTERN is one problem a team of coding agents runs into, with its fix and a paraphrased search
query that shares few words with it (so the vector side has work to do). Items fill the pattern's
slots ({mod}, {fn}, {lib}, …) from pools of modules, identifiers, libraries and versions, and are
framed as one of five kinds with several wordings each, so no two item texts are the same:

    ~100 patterns × 5 kinds × 3-4 framings × 4 problem openings = several thousand distinct
    problem/fix shapes, before the slots multiply them further.

`item(i)` is deterministic in (seed, i): the 1k level is the first 1,000 items of the 10k level,
which is the first 10,000 of the 100k level.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TASK_TYPES = ("code", "test", "docs", "refactor", "bug")
KIND_WEIGHTS = {"lesson": 40, "critique": 20, "output": 25, "message": 10, "note": 5}

# (primary task type, tags, problem, fix, paraphrased query)
PATTERNS: list[tuple[str, tuple[str, ...], str, str, str]] = [
    (
        "code",
        ("sql", "security"),
        "the {endpoint} endpoint built its SQL with an f-string from the request, so a quote in {field} broke out of the query",
        "pass user values as bound parameters (cursor.execute('... WHERE {field} = ?', ({field},))) and add a test with a quote in the input",
        "concatenating untrusted input into a database statement",
    ),
    (
        "code",
        ("security", "shell"),
        "{fn} called subprocess with shell=True and a file name taken from the upload, so a name with ; ran a second command",
        "call subprocess.run with an argument list and no shell, and reject names that start with a dash",
        "command injection through a filename passed to the shell",
    ),
    (
        "code",
        ("security", "paths"),
        "the download handler in {mod} joined the requested path onto the data directory without normalising it, so ../ escaped it",
        "resolve the joined path and check it is still inside the base directory with Path.is_relative_to before opening",
        "directory traversal in a file download route",
    ),
    (
        "code",
        ("security", "secrets"),
        "an API token for {lib} was committed in {file} and showed up in the CI logs",
        "read secrets from the environment, rotate the leaked token, and add a pre-commit secret scanner",
        "credentials leaked into the repository",
    ),
    (
        "code",
        ("security", "auth"),
        "{endpoint} compared the bearer token with == so the comparison time leaked how many leading bytes matched",
        "compare tokens with hmac.compare_digest and store only their hashes",
        "timing attack on api key check",
    ),
    (
        "code",
        ("security", "deserialization"),
        "{mod} loaded cached objects with pickle from a directory other users could write to",
        "store the cache as JSON with a schema, or sign the payload with an HMAC before trusting it",
        "unsafe unpickling of untrusted data",
    ),
    (
        "code",
        ("security", "xss"),
        "the comment preview rendered {field} with |safe, so a script tag in a comment ran in other users' browsers",
        "let the template engine escape it and sanitise the allowed markdown subset with bleach",
        "stored cross site scripting in rendered user text",
    ),
    (
        "code",
        ("security", "ssrf"),
        "the webhook tester in {mod} fetched any URL the user gave, including http://169.254.169.254 metadata",
        "resolve the host first and refuse private, loopback and link-local addresses; follow no redirects",
        "server side request forgery via user supplied url",
    ),
    (
        "code",
        ("performance", "database"),
        "listing {table} ran one query per row to load the owner (N+1), {n} queries for one page",
        "load the owners in one query with a join or an IN (...) batch and assert the query count in a test",
        "page is slow because of a query inside a loop",
    ),
    (
        "code",
        ("performance", "database", "index"),
        "filtering {table} by {field} did a full table scan once the table passed a million rows",
        "add a composite index on ({field}, created_at) and check the plan with EXPLAIN QUERY PLAN",
        "missing database index makes lookups slow on big tables",
    ),
    (
        "code",
        ("performance", "memory"),
        "an lru_cache on a method of {fn} kept every instance alive, a slow memory leak in the worker",
        "cache at module level keyed by the id, or use functools.cached_property on the instance",
        "memoization on methods prevents garbage collection",
    ),
    (
        "code",
        ("performance", "memory"),
        "{fn} read the whole {n} MB export into memory with .read() before parsing it, and the pod was OOM-killed",
        "stream it: iterate over lines or chunks and write results as they come",
        "process runs out of memory loading a large file at once",
    ),
    (
        "code",
        ("performance", "regex"),
        "a regular expression with nested quantifiers in {mod} took seconds on a long line of spaces (catastrophic backtracking)",
        "rewrite it without nested repetition, anchor it, and cap the input length before matching",
        "regex hangs on some inputs ReDoS",
    ),
    (
        "code",
        ("performance", "async"),
        "{fn} called requests.get inside an async handler, so one slow upstream froze the whole event loop",
        "use an async client (httpx.AsyncClient) or move the blocking call to a thread with anyio.to_thread.run_sync",
        "blocking io inside coroutine stalls the server",
    ),
    (
        "code",
        ("performance", "caching"),
        "the {lib} client was created per request in {mod}, so every call paid a new TLS handshake",
        "create one client at startup and reuse its connection pool; close it on shutdown",
        "connection reuse http session per call slow",
    ),
    (
        "code",
        ("concurrency", "race"),
        "two workers claimed the same job because {fn} read the status and then updated it in separate statements",
        "claim with one conditional UPDATE ... WHERE status = 'todo' RETURNING id inside a transaction",
        "race condition double processing of the same job",
    ),
    (
        "code",
        ("concurrency", "locking"),
        "{mod} took lock A then B while the flusher took B then A, and the service deadlocked under load",
        "take locks in one global order, or merge them into one lock; add a timeout and log who holds it",
        "threads wait on each other forever lock ordering",
    ),
    (
        "code",
        ("concurrency", "sqlite"),
        "writes failed with 'database is locked' when the indexer and the API wrote at the same time",
        "use WAL mode, a busy_timeout, and BEGIN IMMEDIATE for transactions that read then write",
        "sqlite busy errors with concurrent writers",
    ),
    (
        "code",
        ("concurrency", "async"),
        "a fire-and-forget asyncio.create_task in {fn} was garbage collected before it finished and its error was lost",
        "keep a reference to background tasks (a set, discard on done) or use a task group",
        "background coroutine silently disappears",
    ),
    (
        "code",
        ("reliability", "retries"),
        "{fn} retried failed calls to {lib} immediately in a tight loop and turned a blip into an outage",
        "retry with exponential backoff and jitter, cap the attempts, and only retry idempotent requests",
        "retry storm hammering a failing dependency",
    ),
    (
        "code",
        ("reliability", "timeouts"),
        "calls to {lib} had no timeout, so a hung connection held a worker forever",
        "set connect and read timeouts on every client and surface the timeout as a clear error",
        "request hangs forever without timeout",
    ),
    (
        "code",
        ("reliability", "idempotency"),
        "a retried POST to {endpoint} created the order twice after the first response was lost",
        "accept an Idempotency-Key header and store the first response under it for 24 hours",
        "duplicate records when the client retries a create",
    ),
    (
        "code",
        ("time", "timezones"),
        "{fn} stored naive datetimes in local time, so reports shifted by an hour after the DST change",
        "store aware UTC datetimes (datetime.now(timezone.utc)) and convert only for display",
        "daylight saving time broke timestamps",
    ),
    (
        "code",
        ("time",),
        "the lease check used time.time(), which jumped back when NTP corrected the clock, so leases never expired",
        "measure durations with time.monotonic() and keep wall-clock time only for display",
        "clock going backwards breaks expiry logic",
    ),
    (
        "code",
        ("numbers", "money"),
        "prices were summed as floats in {mod} and the invoice total was off by a cent",
        "keep money as integer cents or Decimal and round once, at the end, with ROUND_HALF_EVEN",
        "floating point rounding error in currency totals",
    ),
    (
        "code",
        ("encoding", "unicode"),
        "{fn} opened files without an encoding and crashed on Windows with UnicodeDecodeError on a UTF-8 file",
        "always pass encoding='utf-8' to open() and read bytes where the encoding is unknown",
        "text file decoding fails on another operating system",
    ),
    (
        "code",
        ("api", "pagination"),
        "offset pagination on {table} skipped and repeated rows when new rows arrived between pages",
        "paginate with a cursor on (created_at, id) instead of OFFSET",
        "items missing or duplicated across result pages",
    ),
    (
        "code",
        ("api", "validation"),
        "{endpoint} accepted a negative quantity because validation only ran in the web form",
        "validate in the API model (pydantic Field(gt=0)) and return 422 with the field name",
        "server trusts client side checks only",
    ),
    (
        "code",
        ("api", "errors"),
        "{endpoint} returned 500 with a stack trace when {field} was missing",
        "return a 400 with a message naming the missing field and what to send, and log the trace server side",
        "unhandled exception leaks internals to api callers",
    ),
    (
        "code",
        ("api", "compat"),
        "renaming {field} in the response broke the mobile app that still read the old name",
        "add the new field next to the old one, mark the old one deprecated, and remove it after clients moved",
        "breaking change to a json response field",
    ),
    (
        "code",
        ("config",),
        "the service read {env} at import time, so tests that set it later had no effect",
        "read settings when the app is built (a Settings object passed in), not at module import",
        "environment variable read too early",
    ),
    (
        "code",
        ("config",),
        "a typo in a config key was silently ignored and the default pool size of {n} was used in production",
        "validate config with a schema that forbids unknown keys and fail at startup",
        "misspelled setting has no effect",
    ),
    (
        "code",
        ("logging",),
        "{mod} logged the full request including the Authorization header",
        "redact secrets in a logging filter and log request ids instead of bodies",
        "sensitive data written to logs",
    ),
    (
        "code",
        ("logging", "errors"),
        "a bare except: pass in {fn} swallowed the real error and the job reported success",
        "catch the specific exception, log it with the traceback, and re-raise or mark the job failed",
        "exceptions silently ignored hide failures",
    ),
    (
        "code",
        ("python",),
        "{fn} used a mutable default argument (items=[]) and results leaked between calls",
        "default to None and create the list inside the function",
        "list default parameter shared across invocations",
    ),
    (
        "code",
        ("python",),
        "late binding in a lambda inside a loop made every callback in {mod} use the last value of the loop variable",
        "bind the value as a default argument (lambda x=x: ...) or use functools.partial",
        "closures in a loop all see the final variable",
    ),
    (
        "code",
        ("python", "imports"),
        "a circular import between {mod} and its models module failed only when the CLI was imported first",
        "move the shared types to a third module, or import inside the function that needs it",
        "import cycle error depending on import order",
    ),
    (
        "code",
        ("files",),
        "the config file was written in place and a crash mid-write left it truncated",
        "write to a temp file in the same directory, fsync, then os.replace it over the original",
        "partial file after crash atomic write",
    ),
    (
        "code",
        ("files", "resources"),
        "{fn} opened files without closing them and the process hit the open file limit after a day",
        "use with open(...) blocks and check for leaked descriptors in a soak test",
        "too many open files error",
    ),
    (
        "code",
        ("http", "cors"),
        "the frontend could not call {endpoint} from another origin and the browser showed a CORS error",
        "allow the specific origin in the CORS middleware, not '*' with credentials",
        "cross origin request blocked by browser",
    ),
    (
        "code",
        ("caching", "http"),
        "users saw stale data because a CDN cached {endpoint} responses that depended on the cookie",
        "send Cache-Control: private or Vary: Cookie for per-user responses",
        "proxy caches personalised pages",
    ),
    (
        "code",
        ("dependencies",),
        "an unpinned {lib} upgrade to {ver} changed a default and broke the build overnight",
        "pin direct dependencies with upper bounds, keep a lock file, and let a bot propose upgrades",
        "new library release broke us without any code change",
    ),
    (
        "code",
        ("queue", "messaging"),
        "the consumer acknowledged messages before processing them, so a crash lost {n} events",
        "ack after the work is committed and make the handler idempotent so redelivery is safe",
        "events lost when the worker crashes",
    ),
    (
        "code",
        ("database", "migrations"),
        "a migration added a NOT NULL column without a default and locked {table} for minutes",
        "add the column nullable, backfill in batches, then add the constraint",
        "schema change caused downtime on a large table",
    ),
    (
        "code",
        ("database", "transactions"),
        "{fn} sent the confirmation email inside the transaction, which then rolled back",
        "send side effects after commit (an outbox table processed by a worker)",
        "email sent for a change that never committed",
    ),
    (
        "code",
        ("search",),
        "full-text search in {mod} missed results because queries were not tokenised the same way as the documents",
        "use the same analyzer for indexing and querying, and test with punctuation and case",
        "search does not find documents that contain the words",
    ),
    (
        "code",
        ("ml", "embeddings"),
        "vectors from two embedding models were mixed in one index and similarity results were garbage",
        "record the model name and dimension with the index and refuse to mix; reindex on change",
        "embeddings from different models compared",
    ),
    (
        "test",
        ("flaky", "timing"),
        "test_{fn} slept 0.1 s and expected the background job to be done; it failed on the slow CI runner",
        "wait on a condition with a deadline (poll or an event) instead of a fixed sleep",
        "flaky test depends on sleep timing",
    ),
    (
        "test",
        ("flaky", "ordering"),
        "tests in {mod} passed alone but failed together because one test left a row in a shared database",
        "give each test its own temp database (a fixture on tmp_path) and never share state between tests",
        "test order dependence shared state between tests",
    ),
    (
        "test",
        ("flaky", "network"),
        "tests hit the real {lib} API and failed whenever it rate-limited CI",
        "run a local fake of the API on 127.0.0.1 and point the client at it",
        "tests depend on an external service",
    ),
    (
        "test",
        ("mocking",),
        "the test patched {mod}.{fn} where it was defined, not where it was looked up, so the real function still ran",
        "patch the name in the module that uses it (mock.patch('caller_module.{fn}'))",
        "mock patch has no effect",
    ),
    (
        "test",
        ("mocking",),
        "the tests mocked the whole database layer and passed while the real SQL had a syntax error",
        "test the data layer against a real SQLite or a disposable Postgres, and mock only the network edges",
        "over mocking hides real bugs",
    ),
    (
        "test",
        ("coverage",),
        "the new {fn} branch for empty input had no test and broke in production",
        "add a parametrised test for the empty, one and many cases and fail CI below the coverage threshold",
        "edge case without a unit test",
    ),
    (
        "test",
        ("fixtures", "time"),
        "a test compared against datetime.now() and failed when it ran across midnight",
        "inject a clock or freeze time in the test, and compare with a tolerance",
        "test fails around midnight date changes",
    ),
    (
        "test",
        ("randomness",),
        "a property test in {mod} failed once in fifty runs and nobody could reproduce it",
        "print and fix the seed, keep the failing example in the test database, and make it a regular test",
        "random test failure cannot reproduce",
    ),
    (
        "test",
        ("async",),
        "async tests in {mod} were collected but never awaited, so they always passed",
        "mark them with pytest.mark.anyio (or asyncio) and make un-awaited coroutines an error in CI",
        "async test functions silently pass",
    ),
    (
        "test",
        ("snapshots",),
        "snapshot tests were updated blindly with --update and an error message regression slipped in",
        "review snapshot diffs like code and keep snapshots small and focused",
        "golden files overwritten without review",
    ),
    (
        "test",
        ("ci",),
        "CI ran the tests with a different Python ({ver}) than developers and a syntax feature broke the build",
        "pin the interpreter in CI to the supported range and run the matrix of the oldest and newest",
        "works locally but fails in continuous integration",
    ),
    (
        "test",
        ("ci", "performance"),
        "the test suite took {n} minutes because every test started a real server process",
        "use an in-process client for most tests and keep a handful of end-to-end tests with the real process",
        "slow test suite spawning servers",
    ),
    (
        "test",
        ("assertions",),
        "the test asserted only that {fn} returned something truthy and missed that it returned the wrong row",
        "assert on the exact expected values, including ids and order",
        "weak assertions let wrong results pass",
    ),
    (
        "test",
        ("filesystem",),
        "tests wrote into the repository's data/ folder and later runs picked up the leftovers",
        "write only under tmp_path and clean up with fixtures",
        "tests leave files behind that affect later runs",
    ),
    (
        "test",
        ("concurrency",),
        "the race test for {fn} used 2 threads and never reproduced the double claim seen in production",
        "run 16 clients against one database with a barrier so they start together, and assert no duplicates",
        "concurrency bug not reproduced by tests",
    ),
    (
        "docs",
        ("cli",),
        "the README showed the --{field} flag that had been renamed, so the quick start failed",
        "generate the option list from --help in CI and compare it with the docs",
        "documentation shows an outdated command line option",
    ),
    (
        "docs",
        ("examples",),
        "the code example in the {mod} guide no longer ran after the API change",
        "run documentation examples as tests (doctest or a docs test job)",
        "sample code in docs is broken",
    ),
    (
        "docs",
        ("api",),
        "the API reference for {endpoint} did not say which errors it returns, so clients only handled 200",
        "document every status code with an example body, generated from the OpenAPI schema",
        "error responses undocumented",
    ),
    (
        "docs",
        ("setup",),
        "new contributors could not start the project because the setup steps assumed {lib} was already installed",
        "write setup from a fresh machine, list every prerequisite with versions, and test it in a clean container",
        "installation instructions missing prerequisites",
    ),
    (
        "docs",
        ("changelog",),
        "a breaking change to {fn} was not in the changelog and users upgraded blindly",
        "require a changelog entry in every PR that changes behaviour, with an upgrade note for breaking ones",
        "release notes did not mention incompatible change",
    ),
    (
        "docs",
        ("config",),
        "the docs listed {env} but not its default or units, and people set {n} thinking it was seconds",
        "document each setting with type, default, units and an example",
        "configuration option documentation ambiguous",
    ),
    (
        "docs",
        ("architecture",),
        "nobody knew why {mod} keeps its own cache, and a refactor removed it and slowed every request",
        "write a short decision record next to the code explaining why it exists and what it costs to remove",
        "design rationale not written down",
    ),
    (
        "docs",
        ("docstrings",),
        "the docstring of {fn} said it returns None on failure but it raises ValueError",
        "fix the docstring to match and add a test for the error path",
        "function documentation contradicts behaviour",
    ),
    (
        "docs",
        ("links",),
        "{n} links in the docs pointed to pages that moved, found only by users",
        "run a link checker in CI on the built docs",
        "dead links in documentation",
    ),
    (
        "docs",
        ("tutorial",),
        "the tutorial skipped the step that creates the {table} table, so step 3 failed",
        "follow the tutorial end to end in CI from an empty directory",
        "getting started guide misses a step",
    ),
    (
        "refactor",
        ("duplication",),
        "the same validation logic for {field} was copied into {n} handlers and drifted apart",
        "move it into one function used by all handlers and delete the copies in the same change",
        "copy pasted code diverged",
    ),
    (
        "refactor",
        ("naming",),
        "{fn} did three things and its name described one, so callers misused it",
        "split it into functions named for what each does and update call sites",
        "function name misleading does too much",
    ),
    (
        "refactor",
        ("dead-code",),
        "a feature flag for {mod} was on everywhere for a year and both branches were still maintained",
        "remove the flag and the dead branch, and give new flags an owner and an expiry date",
        "stale feature toggles",
    ),
    (
        "refactor",
        ("types",),
        "{fn} passed a dict of twenty keys around and a typo in one key returned None deep in the code",
        "replace the dict with a dataclass or pydantic model and let the type checker catch typos",
        "stringly typed dictionaries cause key errors",
    ),
    (
        "refactor",
        ("coupling",),
        "{mod} imported the web framework, so the domain logic could not be tested without a server",
        "keep the domain pure and move framework code to a thin adapter layer",
        "business logic tangled with http framework",
    ),
    (
        "refactor",
        ("globals",),
        "a module-level global in {mod} held the current user and requests overwrote each other's value",
        "pass the context explicitly or use a contextvars.ContextVar",
        "global state shared between concurrent requests",
    ),
    (
        "refactor",
        ("safety",),
        "a large refactor of {mod} changed behaviour because there were no tests around it first",
        "add characterization tests before refactoring and keep behaviour changes in separate commits",
        "refactoring broke behaviour without tests",
    ),
    (
        "refactor",
        ("performance",),
        "the refactor replaced a dict lookup with a list scan in {fn} and page loads got {n}x slower",
        "benchmark the hot path before and after, and keep a regression benchmark in CI",
        "refactoring introduced a slowdown",
    ),
    (
        "refactor",
        ("interfaces",),
        "{fn} took a boolean flag that flipped its behaviour and every call site read as {fn}(x, True)",
        "make two functions or take a keyword-only enum argument",
        "boolean parameter makes calls unreadable",
    ),
    (
        "refactor",
        ("errors",),
        "error handling in {mod} returned -1, None or raised depending on the path",
        "raise one documented exception type and convert it at the API boundary",
        "inconsistent error signalling",
    ),
    (
        "bug",
        ("off-by-one",),
        "{fn} dropped the last item of each batch of {n} because the range ended at len - 1",
        "iterate with range(0, len(items), size) slices and test sizes that divide evenly and not",
        "last element missing off by one error",
    ),
    (
        "bug",
        ("null",),
        "{fn} crashed with AttributeError: 'NoneType' object has no attribute when {field} was missing",
        "handle the missing case explicitly where the data enters, and type the field as optional",
        "null pointer crash on absent field",
    ),
    (
        "bug",
        ("unicode",),
        "user names with emoji were cut in the middle of a character by {fn}, producing invalid UTF-8",
        "truncate on character boundaries (str slicing, not bytes) or use a grapheme-aware library",
        "string truncation breaks multibyte characters",
    ),
    (
        "bug",
        ("sorting",),
        "sorting {table} by name put 'Zoe' before 'adam' because the comparison was case-sensitive",
        "sort with key=str.casefold, or use a collation in the database",
        "alphabetical order wrong upper and lower case",
    ),
    (
        "bug",
        ("integer",),
        "a counter in {mod} overflowed a 32-bit column after {n} million events",
        "use a 64-bit column and alert when counters pass half their range",
        "integer overflow in id column",
    ),
    (
        "bug",
        ("caching",),
        "after editing a profile users still saw the old {field} because the cache was not invalidated",
        "invalidate or update the cache entry in the same code path as the write, keyed by the id",
        "cache shows outdated value after update",
    ),
    (
        "bug",
        ("state",),
        "the retry of {fn} resumed from a half-updated state and left {table} inconsistent",
        "make the operation a single transaction, or record progress so a retry continues correctly",
        "partial update after failure leaves bad data",
    ),
    (
        "bug",
        ("locale",),
        "{fn} parsed '1,5' as 15 on a German locale machine",
        "parse numbers with an explicit format, never the process locale",
        "number parsing depends on locale settings",
    ),
    (
        "bug",
        ("http",),
        "the client treated a 204 No Content from {endpoint} as an error because it tried to parse JSON",
        "check the status and content length before decoding the body",
        "empty response body json decode error",
    ),
    (
        "bug",
        ("memory",),
        "the websocket handler in {mod} kept every message in a list for logging and memory grew until restart",
        "keep a bounded deque or log and drop; watch memory in a soak test",
        "unbounded buffer causes memory growth",
    ),
    (
        "bug",
        ("floating",),
        "{fn} compared two computed floats with == and missed equal values",
        "compare with math.isclose and an explicit tolerance",
        "float equality check fails",
    ),
    (
        "bug",
        ("signals",),
        "the worker ignored SIGTERM during shutdown and Kubernetes killed it mid-job",
        "handle SIGTERM by stopping intake, finishing or checkpointing the current job, then exiting",
        "graceful shutdown not handled",
    ),
    (
        "bug",
        ("dates",),
        "{fn} computed 'one month later' by adding 30 days and billed on the wrong day",
        "use calendar-aware arithmetic (dateutil.relativedelta) and test month ends and leap years",
        "date arithmetic wrong at month end",
    ),
    (
        "bug",
        ("encoding", "csv"),
        "the CSV export opened in Excel with garbled accents",
        "write UTF-8 with a BOM for Excel, or offer xlsx",
        "exported spreadsheet shows broken characters",
    ),
    (
        "bug",
        ("permissions",),
        "a user could see {table} of another team by changing the id in the URL",
        "check ownership on every object fetch, not only on the list view, and add a test per endpoint",
        "insecure direct object reference authorization missing",
    ),
    (
        "bug",
        ("config",),
        "{fn} used the staging {lib} URL in production because the env var name had a typo",
        "fail at startup when a required setting is missing instead of falling back to a default",
        "wrong environment endpoint used silently",
    ),
]

MODULES = [
    "billing",
    "auth",
    "search",
    "export",
    "payments",
    "notifications",
    "scheduler",
    "ingest",
    "reports",
    "users",
    "inventory",
    "webhooks",
    "uploads",
    "analytics",
    "gateway",
    "sync",
    "audit",
    "checkout",
    "catalog",
    "sessions",
    "metrics",
    "mailer",
    "importer",
    "indexer",
    "queue",
    "admin",
    "storage",
    "profile",
]
FUNCS = [
    "load_orders",
    "sync_accounts",
    "render_invoice",
    "parse_feed",
    "claim_job",
    "send_digest",
    "build_index",
    "resolve_user",
    "fetch_rates",
    "apply_discount",
    "rotate_keys",
    "export_csv",
    "merge_profiles",
    "compute_totals",
    "refresh_tokens",
    "schedule_run",
    "upload_chunk",
    "validate_payload",
    "paginate",
    "normalize_address",
    "dedupe_events",
    "flush_buffer",
    "collect_metrics",
    "archive_logs",
    "import_batch",
    "reconcile_ledger",
    "notify_watchers",
    "score_results",
    "lookup_sku",
    "expire_sessions",
]
LIBS = [
    "requests",
    "httpx",
    "SQLAlchemy",
    "pydantic",
    "boto3",
    "Stripe",
    "Redis",
    "Celery",
    "Kafka",
    "Postgres",
    "Elasticsearch",
    "GitHub",
    "Slack",
    "Twilio",
    "OpenAI",
    "S3",
    "Django",
    "FastAPI",
    "numpy",
    "pandas",
]
FILES = [
    "settings.py",
    "config/prod.yaml",
    "docker-compose.yml",
    ".env.example",
    "deploy/values.yaml",
    "src/app/main.py",
    "scripts/release.sh",
    "Makefile",
    "pyproject.toml",
    "tests/conftest.py",
]
TABLES = [
    "orders",
    "invoices",
    "users",
    "events",
    "accounts",
    "sessions",
    "payments",
    "documents",
    "tickets",
    "products",
    "subscriptions",
    "audit_log",
]
ENDPOINTS = [
    "/api/search",
    "/api/orders",
    "/users/{id}",
    "/api/export",
    "/v2/payments",
    "/api/reports",
    "/webhooks/stripe",
    "/api/uploads",
    "/admin/users",
    "/api/tokens",
    "/v1/items",
    "/api/sessions",
]
FIELDS = [
    "email",
    "name",
    "status",
    "account_id",
    "currency",
    "page_size",
    "locale",
    "sku",
    "owner",
    "display_name",
    "country",
    "due_date",
]
ENVS = ["DATABASE_URL", "REDIS_URL", "HIVE_TIMEOUT", "API_BASE_URL", "WORKERS", "LOG_LEVEL", "S3_BUCKET", "CACHE_TTL"]
VERSIONS = ["2.0", "3.12", "1.4.2", "5.0", "0.27", "3.11", "4.1", "2.31"]
LANGS = ["Python", "TypeScript", "Go", "Rust", "Java", "Kotlin"]
AGENTS = ["coder-1", "coder-2", "coder-3", "tester-1", "tester-2", "critic", "docs-bot", "lead", "refactorer"]
FEATURES = [
    "CSV export",
    "team invites",
    "rate limiting",
    "the search page",
    "SSO login",
    "bulk import",
    "the billing dashboard",
    "webhook retries",
    "audit logging",
    "dark mode",
    "the mobile API",
]

OPENINGS = [
    "{p}",
    "While adding {feature}, {p}",
    "In the {lang} port of {mod}, {p}",
    "After upgrading {lib} to {ver}, {p}",
    "On CI, {p}",
    "In {file}: {p}",
]
FRAMES = {
    "lesson": [
        "Problem: {P}.\nFix: {F}.",
        "Problem: {P}.\nFix: {F}. Checked with a regression test in test_{mod}.py.",
        "Problem: {P} (seen in task #{tid}).\nFix: {F}.",
    ],
    "critique": [
        "Review of task #{tid}: {P}. Requested change: {F}.",
        "Changes requested on the {mod} PR: {P}. Please {F}.",
        "Critic: rejecting for now. {P}. The fix I expect: {F}.",
        "Blocking issue in {fn}: {P}. Suggested: {F}.",
    ],
    "output": [
        "Done: {F} in {mod}. Root cause: {P}. {n} tests pass.",
        "Implemented the fix for #{tid}: {F}. Before this, {P}.",
        "Summary: {P}; resolved by changing {fn} to {F}. Added tests, CI green.",
    ],
    "message": [
        "@{agent} heads-up: {P}. I {F} — please do the same in {mod}.",
        "FYI team: {P}. Workaround until merged: {F}.",
        "@{agent} can you look? {P}. Proposal: {F}.",
    ],
    "note": [
        "Note to self: {P}. Remember to {F}.",
        "Gotcha in {mod}: {P}. What works: {F}.",
    ],
}
QUERY_FRAMES = [
    "{q}",
    "{q}",
    "{q}",
    "how to avoid {q}",
    "{q} in {lang}",
    "lesson about {q}",
    "{q} {mod}",
    "why {q}?",
    "{q} fix",
]


def _slots(rng: random.Random) -> dict:
    return dict(
        mod=rng.choice(MODULES),
        fn=rng.choice(FUNCS),
        lib=rng.choice(LIBS),
        file=rng.choice(FILES),
        table=rng.choice(TABLES),
        endpoint=rng.choice(ENDPOINTS),
        field=rng.choice(FIELDS),
        env=rng.choice(ENVS),
        ver=rng.choice(VERSIONS),
        lang=rng.choice(LANGS),
        agent=rng.choice(AGENTS),
        feature=rng.choice(FEATURES),
        n=rng.randint(2, 400),
        tid=rng.randint(1, 5000),
    )


def _fill(template: str, slots: dict) -> str:
    return template.format(**slots)  # values are not re-parsed, so "/users/{id}" stays literal


@dataclass
class Item:
    kind: str
    task_type: str | None
    title: str
    text: str
    tags: list[str]
    pattern: int


def item(seed: int, i: int) -> Item:
    """The i-th item of the corpus (deterministic)."""
    rng = random.Random(seed * 1_000_003 + i)
    pattern = rng.randrange(len(PATTERNS))
    primary, tags, problem, fix, _ = PATTERNS[pattern]
    kind = rng.choices(list(KIND_WEIGHTS), list(KIND_WEIGHTS.values()))[0]
    slots = _slots(rng)
    p = _fill(problem, slots)
    p = _fill(rng.choice(OPENINGS), {**slots, "p": p})
    f = _fill(fix, slots)
    text = _fill(rng.choice(FRAMES[kind]), {**slots, "P": p[0].upper() + p[1:], "F": f})
    if kind == "message" and rng.random() < 0.5:
        task_type = None
    else:
        task_type = primary if rng.random() < 0.7 else rng.choice(TASK_TYPES)
    title = (p[0].upper() + p[1:])[:120]
    if kind == "critique":
        title = "Critique: " + title[:110]
    elif kind == "output":
        title = f"Output of task #{slots['tid']}"
    return Item(
        kind=kind,
        task_type=task_type,
        title=title,
        text=text,
        tags=list(tags) + ([slots["mod"]] if rng.random() < 0.3 else []),
        pattern=pattern,
    )


@dataclass
class Query:
    text: str
    pattern: int
    task_type: str


def query_pool(seed: int, n: int) -> list[Query]:
    """n search queries: paraphrases of the patterns' problems (not item texts), in several framings."""
    rng = random.Random(seed * 7919 + 17)
    out = []
    for _ in range(n):
        pattern = rng.randrange(len(PATTERNS))
        slots = _slots(rng)
        q = PATTERNS[pattern][4]
        out.append(
            Query(
                text=_fill(rng.choice(QUERY_FRAMES), {**slots, "q": q}), pattern=pattern, task_type=PATTERNS[pattern][0]
            )
        )
    return out
