"""Backups of a live board: `hiveboard backup [PATH]`, `hiveboard backup --verify PATH`, `hiveboard restore PATH`.

A backup is a directory: the store as one file (SQLite's online backup API, or `pg_dump`'s custom format),
the data directory's config.toml when there is one, and `manifest.json` with the rows of every table and
the sha256 of every file. It is taken while agents write:

- on SQLite, `Connection.backup` copies every page inside one read transaction, which in WAL mode writers
  do not wait for; the copy is the database as of that transaction's start, with every write committed
  before it;
- on PostgreSQL, one repeatable-read transaction exports its snapshot, `pg_dump --snapshot` dumps exactly
  that snapshot, and the rows of the manifest are counted in it, so the counts and the dump agree.

The vector index is not in a backup: the store is its source of truth, and restore rebuilds it from the
store (as `hiveboard reindex` does), which is always right for the embedding model configured then.

`verify` reads the manifest, the files' sizes and checksums, and (SQLite) opens the copy, checks its pages
and counts its rows; (PostgreSQL) lists the dump's contents with `pg_restore --list`. `restore` verifies
first and writes only into an empty data directory or database; a restore that fails takes out what it
wrote (the SQLite file) or wrote nothing (PostgreSQL: one transaction).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from hiveboard.board.dialect import sqlite_file_check, sqlite_file_copy
from hiveboard.board.worker import Worker

from .config import SetupError, config_file

if TYPE_CHECKING:
    from hiveboard.board.tasks import Board

    from .config import Settings

log = logging.getLogger("hiveboard")

FORMAT = 1  # the manifest's format; a later hiveboard reads older ones
MANIFEST = "manifest.json"
SQLITE_FILE = "board.sqlite"
PG_FILE = "board.pgdump"
CONFIG_FILE = "config.toml"
CHUNK = 1 << 20


class BackupRefused(SetupError):
    """A backup that cannot be taken, verified or restored, in one sentence; nothing was written."""


class FileEntry(BaseModel):
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """manifest.json: what a backup holds, checked by `verify` before anything else is read."""

    hiveboard_backup: int = Field(ge=1, description="the manifest's format")
    hiveboard: str = Field("", description="the version that took it")
    created_at: str
    store: Literal["sqlite", "postgresql"]
    rows: dict[str, int] = Field(description="every table's rows at the backup's instant")
    files: dict[Literal["board.sqlite", "board.pgdump", "config.toml"], FileEntry]
    vectors: str = ""


@dataclass(frozen=True)
class Taken:
    path: Path
    manifest: Manifest


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def default_path(home: Path) -> Path:
    """<home>/backups/<UTC time>: sorts by age, which retention relies on."""
    return Path(home) / "backups" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


# ------------------------------------------------------------------------------------------------ take


def take(path: Path, *, db_path: Path | None = None, db_url: str | None = None, config: Path | None = None) -> Taken:
    """Back the board up into the new directory `path` (refused if it exists and is not empty)."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupRefused(f"{path} already exists and is not an empty directory; name a new directory for the backup")
    made = not path.exists()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if db_url:
            rows, store_file = _dump_postgres(db_url, path / PG_FILE), PG_FILE
        else:
            rows, store_file = _copy_sqlite(Path(db_path), path / SQLITE_FILE), SQLITE_FILE
        names = [store_file]
        config = config if config is not None else config_file()
        if config.is_file():  # the team's settings come back with the board
            shutil.copyfile(config, path / CONFIG_FILE)
            names.append(CONFIG_FILE)
        manifest = Manifest(
            hiveboard_backup=FORMAT,
            hiveboard=_version(),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            store="postgresql" if db_url else "sqlite",
            rows=rows,
            files={n: FileEntry(bytes=(path / n).stat().st_size, sha256=sha256(path / n)) for n in names},
            vectors="not copied: restore rebuilds the index from the store",
        )
        _write_atomic(path / MANIFEST, manifest.model_dump_json(indent=1) + "\n")
    except BaseException:
        _remove(path, made)  # a half-taken backup must not pass for one
        raise
    return Taken(path, manifest)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hiveboard")
    except PackageNotFoundError:
        return ""


def _remove(path: Path, made: bool) -> None:
    if made:
        shutil.rmtree(path, ignore_errors=True)
    else:
        for child in path.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()


def _write_atomic(path: Path, text: str) -> None:
    temp = path.with_name(path.name + ".part")
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    temp.replace(path)


def _copy_sqlite(source: Path, target: Path) -> dict[str, int]:
    """The online backup of the SQLite board into `target`, as one self-contained file (no -wal); its rows."""
    if not source.is_file():
        raise BackupRefused(f"there is no board at {source}; point --home or --db at the board to back up")
    os.close(os.open(target, os.O_CREAT | os.O_RDWR, 0o600))  # the board is its owner's alone, as at home
    return sqlite_file_copy(source, target)


def pg_tool(name: str) -> str:
    """pg_dump or pg_restore: on PATH, else the newest of Debian's versioned directories (kept off PATH)."""
    found = shutil.which(name)
    versioned = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    if versioned:  # Debian's /usr/bin wrapper picks a version by cluster; the newest reads every server
        return str(versioned[-1])
    if found is None:
        raise BackupRefused(
            f"{name} is not installed; install PostgreSQL's client programs (apt-get install postgresql-client)"
        )
    return found


def tool_major(tool: str) -> int:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"(\d+)(?:\.\d+)?", out)
    if not found:
        raise BackupRefused(f"{tool} --version said {out.strip()!r}, not a version; check the PostgreSQL install")
    return int(found[1])


def _pg_env(url: str) -> dict[str, str]:
    """The URL as libpq's environment: the password stays out of the process list."""
    from hiveboard.board.optional import POSTGRES, need

    conninfo_to_dict = need("psycopg.conninfo", POSTGRES).conninfo_to_dict

    names = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "password": "PGPASSWORD",
        "dbname": "PGDATABASE",
        "sslmode": "PGSSLMODE",
        "passfile": "PGPASSFILE",
    }
    env = dict(os.environ)
    for key, value in conninfo_to_dict(url).items():
        if key in names and value is not None:
            env[names[key]] = str(value)
    return env


def _pg_rows(conn) -> dict[str, int]:
    names = [
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
    ]
    return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


def _dump_postgres(url: str, target: Path) -> dict[str, int]:
    """pg_dump of one exported snapshot, and the rows of every table counted in that same snapshot."""
    from hiveboard.board.db import redact
    from hiveboard.board.optional import POSTGRES, need

    psycopg = need("psycopg", POSTGRES)

    dump = pg_tool("pg_dump")
    with psycopg.connect(url, autocommit=True, application_name="hiveboard-backup") as conn:
        server = conn.info.server_version // 10_000
        client = tool_major(dump)
        if client < server:
            raise BackupRefused(
                f"{dump} is version {client} but the server {redact(url)} runs PostgreSQL {server}, and pg_dump "
                f"must be at least the server's version; install postgresql-client-{server}"
            )
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        rows = _pg_rows(conn)
        done = subprocess.run(
            [dump, "--format=custom", "--no-owner", "--no-privileges", f"--snapshot={snapshot}", "-f", str(target)],
            env=_pg_env(url),
            capture_output=True,
            text=True,
            timeout=24 * 3600,
        )
        conn.execute("COMMIT")
    if done.returncode != 0:
        raise BackupRefused(f"pg_dump failed ({_last_line(done.stderr)}); nothing was kept, fix that and run it again")
    return rows


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


# ------------------------------------------------------------------------------------------------ verify


def verify(path: Path) -> Manifest:
    """The manifest of the backup at `path` once every file and count in it is checked; BackupRefused
    (naming the first thing found wrong) otherwise."""
    path = Path(path)
    try:
        text = (path / MANIFEST).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BackupRefused(f"{path} holds no {MANIFEST}; it is not a hiveboard backup, or not a whole one") from None
    except (OSError, ValueError) as exc:
        raise BackupRefused(f"{path / MANIFEST} cannot be read ({exc}); the backup is damaged") from None
    try:
        if json.loads(text).get("hiveboard_backup", 0) > FORMAT:
            raise BackupRefused(f"{path} was written by a newer hiveboard; restore it with that version")
        manifest = Manifest.model_validate_json(text)
    except (ValueError, AttributeError, TypeError) as exc:  # not JSON, not an object, or not a manifest's fields
        reason = str(exc).splitlines()[0]
        raise BackupRefused(
            f"{path / MANIFEST} is not a hiveboard backup's manifest ({reason}); the backup is damaged"
        ) from None
    files = manifest.files
    store_file = SQLITE_FILE if manifest.store == "sqlite" else PG_FILE
    if store_file not in files:
        raise BackupRefused(f"{path / MANIFEST} lists no {store_file}; the backup is damaged")
    for name, want in files.items():
        file = path / name
        if not file.is_file():
            raise BackupRefused(f"{file} is missing; the backup is not whole")
        if file.stat().st_size != want.bytes:
            raise BackupRefused(
                f"{file} has {file.stat().st_size} bytes, the manifest says {want.bytes}: the backup is truncated "
                "or altered; use another backup"
            )
        if sha256(file) != want.sha256:
            raise BackupRefused(f"{file} does not match its sha256 in the manifest: the backup is altered; use another")
    if manifest.store == "sqlite":
        _verify_sqlite(path / SQLITE_FILE, manifest.rows)
    else:
        listed = subprocess.run(
            [pg_tool("pg_restore"), "--list", str(path / PG_FILE)], capture_output=True, text=True, timeout=3600
        )
        if listed.returncode != 0:
            raise BackupRefused(f"pg_restore cannot read {path / PG_FILE} ({_last_line(listed.stderr)}); use another")
    return manifest


def _verify_sqlite(file: Path, rows: dict[str, int]) -> None:
    try:
        found, counted = sqlite_file_check(file)
    except ValueError as exc:
        raise BackupRefused(f"{file} is not a readable SQLite database ({exc}); use another backup") from None
    if found != ["ok"]:
        raise BackupRefused(f"{file} fails SQLite's integrity check ({found[0]}); use another backup")
    if counted != rows:
        differ = sorted(n for n in {*counted, *rows} if counted.get(n) != rows.get(n))
        raise BackupRefused(f"{file} holds other rows than its manifest says (in {', '.join(differ)}); use another")


# ------------------------------------------------------------------------------------------------ restore


def restore(path: Path, *, home: Path, db_path: Path | None = None, db_url: str | None = None) -> Manifest:
    """Verify the backup at `path`, then put its board into the empty data directory `home` (and its
    database: the SQLite file db_path, or the empty PostgreSQL database db_url). Returns the manifest.
    The vector index is the caller's to rebuild (it needs the memory layer)."""
    manifest = verify(path)
    home = Path(home)
    if manifest.store == "sqlite" and db_url:
        raise BackupRefused("this backup is of a SQLite board; restore it without a postgresql:// --db")
    if manifest.store == "postgresql" and not db_url:
        raise BackupRefused("this backup is of a PostgreSQL board; restore it with --db naming an empty database")
    if home.exists() and (not home.is_dir() or any(home.iterdir())):
        raise BackupRefused(f"the data directory {home} is not empty; restore into a new or empty directory")
    made = not home.exists()
    db_path = Path(db_path) if db_path else home / "hiveboard.db"
    if not db_url and db_path.exists():
        raise BackupRefused(f"the database {db_path} already exists; restore into a new file (--db) or directory")
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if db_url:
            _restore_postgres(path / PG_FILE, db_url)
        else:
            _restore_sqlite(path / SQLITE_FILE, db_path)
        if CONFIG_FILE in manifest.files:
            shutil.copyfile(path / CONFIG_FILE, home / CONFIG_FILE)
    except BaseException:
        if not db_url and db_path.exists() and not db_path.is_relative_to(home):
            db_path.unlink()
        _remove(home, made)
        raise
    return manifest


def _restore_sqlite(source: Path, target: Path) -> None:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = target.with_name(target.name + ".restoring")
    fd = os.open(temp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)  # the board is its owner's alone
    with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out, CHUNK)
        out.flush()
        os.fsync(out.fileno())
    temp.replace(target)


def _restore_postgres(dump: Path, url: str) -> None:
    from hiveboard.board.db import redact
    from hiveboard.board.optional import POSTGRES, need

    psycopg = need("psycopg", POSTGRES)

    with psycopg.connect(url, autocommit=True, application_name="hiveboard-restore") as conn:
        held = _pg_rows(conn)
    if held:
        raise BackupRefused(
            f"the database {redact(url)} already holds tables ({', '.join(sorted(held)[:3])}…); restore into a new, "
            "empty database (createdb NAME)"
        )
    done = subprocess.run(
        [pg_tool("pg_restore"), "--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges"]
        + ["-d", _pg_env(url).get("PGDATABASE", ""), str(dump)],
        env=_pg_env(url),
        capture_output=True,
        text=True,
        timeout=24 * 3600,
    )
    if done.returncode != 0:
        raise BackupRefused(f"pg_restore failed ({_last_line(done.stderr)}); nothing was restored")


# ------------------------------------------------------------------------------------------------ schedule


def prune(folder: Path, keep: int) -> list[Path]:
    """Remove all but the `keep` newest backups in `folder` (only directories holding a manifest)."""
    found = sorted(p for p in Path(folder).iterdir() if (p / MANIFEST).is_file()) if Path(folder).is_dir() else []
    gone = found[:-keep] if keep > 0 else []
    for old in gone:
        shutil.rmtree(old, ignore_errors=True)
    return gone


def due(folder: Path, every_seconds: float) -> bool:
    """Whether the newest backup in `folder` is older than `every_seconds` (or there is none)."""
    found = sorted(p for p in Path(folder).iterdir() if (p / MANIFEST).is_file()) if Path(folder).is_dir() else []
    return not found or time.time() - (found[-1] / MANIFEST).stat().st_mtime >= every_seconds


class BackupWorker(Worker):
    """The backups `hiveboard serve` takes by itself ([backup] every_hours): one when the newest in the folder
    is older than that, then all but the `keep` newest removed. On PostgreSQL set it on one node only."""

    def __init__(self, board: Board, settings: Settings):
        self.store_path, self.db_url = settings.db_path, settings.db_url
        self.folder = Path(settings.backup.folder or Path(settings.home) / "backups")
        self.every = settings.backup.every_hours * 3600
        self.keep = settings.backup.keep
        super().__init__(
            board.store.notifier,
            name="hiveboard-backup",
            poll_seconds=min(600.0, max(1.0, self.every / 10)),
            log=log,
            failure="the scheduled backup failed; it is tried again at the next poll",
            error_pause=60.0,
        )

    def step(self, n: int) -> bool:
        if not due(self.folder, self.every):
            return False
        path = self.folder / default_path(self.folder).name
        taken = take(path, db_path=self.store_path, db_url=self.db_url)
        log.info("backup: %s rows into %s", sum(taken.manifest.rows.values()), taken.path)
        prune(self.folder, self.keep)
        return False
