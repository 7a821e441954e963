"""The board and the memory opened from the settings: one home for the CLI's commands and the memory file.

A data directory or database that cannot be used stops the command with a `SetupError`: one sentence
naming the directory or file and what to do, checked before anything is created, so a broken set-up is
left as it was. Commands that only read (`read_only=True`) also work on a read-only data directory.

Imports stay inside the functions: `hiveboard board` and `agent` open the board without loading the
memory's models (see the cli module's docstring).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hiveboard.board.db import Store
    from hiveboard.board.tasks import Board
    from hiveboard.memory.service import Memory

    from .config import Settings

HOME = "--home or HIVEBOARD_HOME"
DB = "--db or HIVEBOARD_DB"


def private_home(home) -> None:
    """The data directory, readable by its owner only (created so, or tightened if it is ours)."""
    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix" and home.stat().st_uid == os.geteuid() and home.stat().st_mode & 0o077:
        home.chmod(0o700)


def open_board(settings: Settings, read_only: bool = False) -> Board:
    """The board of the settings' data directory; read_only: for a command that never writes, which then
    also reads a board whose directory it may not write."""
    from hiveboard.board.limits import Limits
    from hiveboard.board.tasks import Board

    limits = Limits(message_chars=settings.max_message_chars, output=settings.max_output_chars)
    return Board(
        open_store(settings, read_only),
        lease_seconds=settings.lease_seconds,
        limits=limits,
        quotas=settings.quotas,
        prices=settings.prices,
    )


def open_store(settings: Settings, read_only: bool = False) -> Store:
    """The store, or SetupError before anything is created when the directory or database cannot be used."""
    from hiveboard.board.db import Store

    from .config import SetupError

    if settings.db_url:
        return _server_store(settings)
    home, db = Path(settings.home), settings.db_path
    if problem := home_problem(home) or _db_is_a_directory(db):
        raise SetupError(problem)
    if read_only and db.is_file() and not _writable(db):
        return _read_only_store(db)
    for folder, setting in ((home, HOME), (db.parent, DB)):
        blocker = _unwritable(folder)
        if blocker is None or (read_only and db.is_file()):  # a database it may write, in a data directory elsewhere
            continue
        if read_only:  # and there is no database yet
            raise SetupError(
                f"there is no board at {db}, and none can be made because {blocker} is read-only for this user; "
                f"point {setting} at an existing board, or make {blocker} writable"
            )
        raise SetupError(_read_only_directory(folder, blocker, setting))
    made = not home.exists()
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        store = Store(db)
    except (OSError, _driver_error()) as exc:
        if made and not any(home.iterdir()):
            home.rmdir()
        raise SetupError(database_problem(exc, db)) from None
    if _unwritable(home) is None:
        private_home(home)  # tightened once the board opened: a refused set-up is left as it was
    return store


def _server_store(settings: Settings) -> Store:
    """The store on a database server (PostgreSQL): the data directory still holds the config and the memory's
    local files; the URL's password stays out of every message."""

    from .config import SetupError

    home = Path(settings.home)
    if problem := home_problem(home):
        raise SetupError(problem)
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(database_problem(exc, home)) from None
    store = open_server_store(settings.db_url, settings.db_pool, settings.db_pool_wait)
    if _unwritable(home) is None:
        private_home(home)  # tightened once the board opened, as on SQLite (the web secret, the config)
    return store


def open_server_store(url: str, pool: int = 20, pool_wait: float = 5.0) -> Store:
    """The store at a database server's URL, or SetupError: one sentence, the URL without its password."""
    from hiveboard.board.db import Store, dialect_for
    from hiveboard.board.errors import Unavailable

    from .config import SetupError

    try:
        return Store(url, pool=pool, pool_wait=pool_wait)
    except (Unavailable, dialect_for(url).Error) as exc:  # the server, the URL or the credentials
        raise SetupError(_unusable(url, exc)) from None


def _read_only_store(db: Path) -> Store:
    from hiveboard.board.db import Store

    from .config import SetupError

    try:
        store = Store(db, read_only=True)
    except (OSError, _driver_error()) as exc:
        raise SetupError(database_problem(exc, db, read_only=True)) from None
    if store.pending:
        store.close()
        raise SetupError(_outdated(db))
    return store


def home_problem(home: Path) -> str | None:
    """Why `home` cannot be a data directory at all (it, or a directory above it, is a file), or None."""
    blocker = _existing(home)
    if blocker is not None and not blocker.is_dir():
        what = "is a file" if blocker == home else f"cannot be made: {blocker} is a file"
        return f"the data directory {home} {what}, not a directory; point {HOME} at a directory (or move the file away)"
    return None


def _db_is_a_directory(db: Path) -> str | None:
    return f"the database {db} is a directory; point {DB} at a file" if db.is_dir() else None


def _unwritable(folder: Path) -> Path | None:
    """The directory that stops this user from writing in `folder` (or making it): itself or the ancestor it
    would be made in; None if nothing does."""
    blocker = _existing(folder)
    return None if blocker is None or os.access(blocker, os.W_OK | os.X_OK) else blocker


def _read_only_directory(
    folder: Path, blocker: Path, setting: str, why: str = "this command writes to the board"
) -> str:
    what = "data directory" if setting == HOME else "database's directory"
    if blocker == folder:
        return (
            f"the {what} {folder} is read-only for this user, and {why}; make it writable, or point {setting} at "
            "another directory"
        )
    return (
        f"the {what} {folder} cannot be made because {blocker} is read-only for this user; make it yourself, or "
        f"point {setting} at another directory"
    )


def _damaged(db: Path, reason: object) -> str:
    return (
        f"the database {db} is damaged ({reason}); restore it from a backup, or move it away so that a new, empty "
        "board is made there"
    )


def _outdated(db: Path) -> str:
    return (
        f"the database {db} was written by an older hiveboard and needs an upgrade, which cannot be written in the "
        f"read-only directory {db.parent}; run any hiveboard command once with write access to it"
    )


def _existing(path: Path) -> Path | None:
    """`path` or its nearest ancestor that exists (None only for a path on nothing at all)."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return None


def _writable(db: Path) -> bool:
    """Whether this user may write the database file and create its -wal and -shm files beside it."""
    return os.access(db, os.R_OK | os.W_OK) and os.access(db.parent, os.W_OK | os.X_OK)


def _driver_error() -> type[Exception]:
    from hiveboard.board.dialect import SQLite

    return SQLite.Error


def database_problem(exc: Exception, db: Path, read_only: bool = False) -> str:
    """The database's error (the driver's, or the file system's) as one sentence saying what to do."""
    if isinstance(exc, OSError):
        if exc.errno == errno.EISDIR:
            return f"the database {db} is a directory; point {DB} at a file"
        reason = exc.strerror or str(exc)
        return (
            f"cannot open the database {db} ({reason}); make it and {db.parent} writable for this user, "
            f"or point {DB} at another file"
        )
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "malformed" in str(exc):
        return _damaged(db, exc)
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_IOERR")):
        if not os.access(db, os.R_OK):
            return f"the database {db} is not readable by this user ({exc}); make it readable, or run as its owner"
        if read_only:
            return (
                f"the database {db} has a write-ahead log that only a process allowed to write in {db.parent} can "
                "read; run any hiveboard command once with write access to it"
            )
        return (
            f"the database {db} cannot be written here ({exc}); make it and {db.parent} writable for this user, "
            f"or point {DB} at another file"
        )
    if name == "SQLITE_BUSY":
        return f"the database {db} is locked by another process ({exc}); try again once it has finished"
    return f"the database {db} cannot be used ({exc}); hiveboard doctor checks it"


def check_data(home: Path, db: Path) -> list[tuple[str, str | None, str]]:
    """The data directory and the database as `hiveboard doctor` sees them, changing nothing: for each,
    (what, the problem or None, what was found)."""
    checks: list[tuple[str, str | None, str]] = []
    blocker = _unwritable(home)
    why = "only the commands that read (board, agent list, memory export) work there"
    if problem := home_problem(home) or (blocker and _read_only_directory(home, blocker, HOME, why)):
        checks.append(("data directory", problem, str(home)))
    else:
        made = "writable" if home.exists() else "not there yet: the first command that writes makes it"
        checks.append(("data directory", None, f"{home} ({made})"))
    if problem := _db_is_a_directory(db):
        checks.append(("database", problem, str(db)))
    elif not db.exists():
        if problem := home_problem(db.parent):  # the directory it would be made in is a file
            checks.append(("database", problem, str(db)))
        else:
            checks.append(("database", None, f"{db} (not there yet: the first command that writes makes it)"))
    else:
        checks.append(("database", *_inspect(db)))
    return checks


def check_server(settings: Settings) -> list[tuple[str, str | None, str]]:
    """`hiveboard doctor` on a board kept on a database server: the data directory and the database (reached,
    its schema brought up to date), the URL without its password."""
    from .config import SetupError

    home = Path(settings.home)
    checks: list[tuple[str, str | None, str]] = [("data directory", home_problem(home), str(home))]
    try:
        open_store(settings).close()
    except SetupError as exc:
        return [*checks, ("database", str(exc), settings.database_label)]
    return [*checks, ("database", None, f"{settings.database_label} (reachable; schema current)")]


def check_vectors(settings: Settings) -> list[tuple[str, str | None, str]]:
    """`hiveboard doctor` on the memory's vector index when it is not the embedded one (or must not be):
    the Chroma server answers its heartbeat; a board on a database server without one is a problem."""
    if problem := shared_memory_problem(settings):
        return [("vector index", problem, "embedded Chroma")]
    if not settings.chroma_url:
        return []
    import httpx

    from hiveboard.board.errors import first_line

    url = settings.chroma_url.rstrip("/")
    try:
        answer = httpx.get(f"{url}/api/v2/heartbeat", timeout=5)
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        return [
            (
                "vector index",
                f"the Chroma server {url} cannot be reached ({first_line(exc)}); start it "
                "(chroma run) or fix HIVEBOARD_CHROMA_URL",
                url,
            )
        ]
    return [("vector index", None, f"{url} (Chroma server answers)")]


def _inspect(db: Path) -> tuple[str | None, str]:
    """(problem or None, what was found) for an existing database: readable, intact, its schema current."""
    from hiveboard.board.db import Store

    try:
        store = Store(db, read_only=True)
    except (OSError, _driver_error()) as exc:
        return database_problem(exc, db, read_only=not _writable(db)), str(db)
    try:
        if damage := store.dialect.check(store.db):
            return _damaged(db, damage), str(db)
        if store.pending and not _writable(db):
            return _outdated(db), str(db)
        later = f"; the next command that writes applies {len(store.pending)} new migrations" if store.pending else ""
        return None, f"{db} (readable and intact{later})"
    finally:
        store.close()


def _unusable(url: str, exc: Exception) -> str:
    """Why the database server at `url` cannot be used, in one sentence without its password."""
    from hiveboard.board.db import redact
    from hiveboard.board.errors import first_line

    reason = (getattr(exc, "reason", "") or first_line(exc)).replace(url, "…")
    return (
        f"the database {redact(url)} cannot be used ({reason}); check that the server runs and that the URL, "
        "user and password (PGPASSWORD, ~/.pgpass or passfile=) are right"
    )


def refuse_unusable_database(settings: Settings) -> None:
    """SetupError when the board's database server cannot be used, found by connecting alone (no migration, no
    write): called before refusing a set-up for another reason, since a dead database is the first thing to fix."""
    from hiveboard.board.db import dialect_for
    from hiveboard.board.errors import Unavailable

    from .config import SetupError

    url = settings.db_url
    if not url:
        return
    dialect = dialect_for(url)
    try:
        dialect.connect(url).close()
    except (Unavailable, dialect.Error) as exc:
        raise SetupError(_unusable(url, exc)) from None


def shared_memory_problem(settings: Settings) -> str | None:
    """Why the memory cannot serve a board kept on a database server, or None: every node must search one
    vector index, and an embedded Chroma is one per data directory (and not safe across processes)."""
    if settings.db_url and not settings.chroma_url:
        return (
            f"the board is on {settings.database_label}, shared by every node, but the memory's vectors would be "
            "in an embedded Chroma of this node alone; start a Chroma server (chroma run) and set "
            "HIVEBOARD_CHROMA_URL to it on every node"
        )
    return None


def open_memory_for(settings: Settings, board: Board, rebuild: bool = False) -> Memory:
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.service import open_memory

    embedder = get_embedder(settings.embedding_model, settings.embedding_base_url, settings.embedding_api_key)
    background = None
    if settings.embedding_process and settings.embedding_base_url is None:  # the offline model: see embed_process
        from hiveboard.memory.embed_process import ProcessEmbedder

        background = ProcessEmbedder(embedder.name, embedder.dim)
    return open_memory(
        board,
        embedder,
        settings.home,
        chroma_url=settings.chroma_url,
        base_url=settings.embedding_base_url,
        rebuild=rebuild,
        collection=settings.chroma_collection,
        background_embedder=background,
    )
