"""A throwaway PostgreSQL cluster on loopback, for the tests and the benchmarks: initdb in a temporary
directory, a free port, the server run as the `postgres` user when this is root (it refuses root), and
stopped and removed afterwards. Nothing here is a mock: it is the PostgreSQL a user would run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

START_TIMEOUT = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """A throwaway PostgreSQL cluster on loopback (initdb in a temporary directory, a free port), as a
    user would run the real server; each test gets a database of its own."""

    def __init__(self, root: Path, settings: str = "-c fsync=off"):
        """settings: the server's own, as `-c name=value` options; by default fsync is off, which a
        throwaway cluster for tests can afford ("" for PostgreSQL's defaults, as a user runs it)."""
        binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))  # Debian keeps them off PATH
        initdb = str(binaries[-1]) if binaries else shutil.which("initdb")
        if initdb is None:
            raise FileNotFoundError("PostgreSQL's initdb is not installed (apt-get install postgresql)")
        bindir = Path(initdb).resolve().parent
        self.data, self.port = root / "data", free_port()
        root.mkdir(parents=True, exist_ok=True)
        as_user: list[str] = []
        if os.geteuid() == 0:  # the server refuses to run as root: run it as the postgres user, in a
            # directory of its own that it can reach (pytest's temporary directories are root's alone)
            root = self.root = Path(tempfile.mkdtemp(prefix="hiveboard-pg-"))
            self.data = root / "data"
            shutil.chown(root, "postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
        self.ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(self.data)]
        self.bindir, self.as_user = bindir, as_user
        quiet = dict(check=True, capture_output=True, timeout=START_TIMEOUT)
        subprocess.run([*as_user, str(initdb), "-D", str(self.data), "-A", "trust", "-U", "postgres"], **quiet)
        options = f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=300 {settings}"
        self.options = options
        subprocess.run([*self.ctl, "-o", options, "-l", str(root / "log"), "-w", "start"], **quiet)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}"

    def database(self, template: str | None = None) -> str:
        """A new database's URL: empty, or a copy of the database `template` (a URL of this cluster's, to which
        nothing may be connected: PostgreSQL copies it file by file)."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:16]}"
        copy = f" TEMPLATE {template.rsplit('/', 1)[1]}" if template else ""
        with psycopg.connect(f"{self.url}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}{copy}")
        return f"{self.url}/{name}"

    def restart(self) -> None:
        """Restart the server (every connection to it breaks), as an operator's restart or a failover does."""
        log = self.data.parent / "log"  # the server's output goes there, never to this pipe (it outlives pg_ctl)
        subprocess.run(
            [*self.ctl, "-m", "fast", "-w", "-l", str(log), "restart"],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT,
        )

    def down(self) -> None:
        """Stop the server, keeping its data (up() starts it again): the database cannot be reached meanwhile."""
        subprocess.run([*self.ctl, "-m", "fast", "-w", "stop"], check=True, capture_output=True, timeout=START_TIMEOUT)

    def up(self) -> None:
        log = self.data.parent / "log"
        subprocess.run(
            [*self.ctl, "-o", self.options, "-l", str(log), "-w", "start"],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT,
        )

    def stop(self) -> None:
        subprocess.run([*self.ctl, "-m", "immediate", "stop"], capture_output=True, timeout=START_TIMEOUT)
        if getattr(self, "root", None) is not None:
            shutil.rmtree(self.root, ignore_errors=True)
