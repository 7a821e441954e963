"""One process owns the embedded Chroma of a data directory; the others relay vector queries to it.

Each IDE window starts its own `hiveboard serve`, but an embedded Chroma is not safe to share: a
long-lived process does not see another's vector writes. So the first server to take the lock file
`<home>/memory.lock` opens Chroma, runs the indexing worker, and answers vector queries from the
others on a loopback-only endpoint whose port and secret it writes to `<home>/memory-owner.json`
(readable by this user only). When the owner exits, the next query from another process takes the
lock over and opens Chroma itself. With a Chroma server (HIVEBOARD_CHROMA_URL) every process talks
to that server directly and none of this is needed.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import IndexUnavailable
from .neighbours import Neighbours

if TYPE_CHECKING:  # Chroma and numpy are imported when the index is opened, not with this module
    import numpy as np

    from .index import VectorIndex

log = logging.getLogger("hiveboard.memory")
RELAY_POLL = 0.05  # seconds: how often the relay's loop looks whether close() asked it to end


try:
    import fcntl
except ImportError:  # Windows: msvcrt locks the first byte instead
    fcntl = None
    import msvcrt


def _try_lock(handle) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


class SharedIndex:
    """Vector queries for this process: answered locally when it owns the index, relayed otherwise."""

    def __init__(self, home: Path, open_index: Callable[[], VectorIndex], on_owner: Callable[[], None] = lambda: None):
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self._open_index = open_index
        self.on_owner = on_owner
        self._lock = threading.Lock()
        self._lock_file = None
        self._server: ThreadingHTTPServer | None = None
        self._closed = False
        self.index: VectorIndex | None = None
        self.acquire()

    @property
    def owner(self) -> bool:
        return self.index is not None

    def acquire(self) -> bool:
        """Become the owner if nobody is; returns whether this process owns the index now."""
        with self._lock:
            if self.index is not None:
                return True
            if self._closed:
                return False
            handle = open(self.home / "memory.lock", "a+")
            if not _try_lock(handle):
                handle.close()
                return False
            try:
                self.index = self._open_index()
                self._serve()
            except BaseException:
                self.index = None
                handle.close()  # never keep the lock without an open index: another process may do better
                raise
            self._lock_file = handle
        log.info("this process owns the memory index in %s", self.home)
        self.on_owner()
        return True

    def _serve(self) -> None:
        import numpy as np

        secret = secrets.token_urlsafe(24)
        index = self.index

        class Relay(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                given = self.headers.get("x-hiveboard-secret", "").encode("utf-8", "replace")
                if not hmac.compare_digest(given, secret.encode()):
                    self.send_error(403)
                    return
                try:
                    body = json.loads(self.rfile.read(min(int(self.headers.get("content-length", 0)), 1 << 20)))
                    vector = np.asarray(body["vector"], dtype=np.float32)
                    n = int(body["n"])
                    if vector.ndim != 1 or not 1 <= n <= 200:
                        raise ValueError("vector must be 1-d and n within 1..200")
                    filters = {k: body.get(k) for k in ("task_type", "kinds")}  # tags: in SQLite
                except (ValueError, KeyError, TypeError) as exc:
                    self.send_error(400, str(exc))
                    return
                try:
                    hits = index.query(
                        vector,
                        n,
                        include_deprecated=bool(body.get("include_deprecated")),
                        first_only=bool(body.get("first_only")),
                        **filters,
                    )
                    payload, status = json.dumps(hits._asdict()).encode(), 200
                except Exception as exc:  # report to the relaying process rather than drop the connection
                    payload, status = json.dumps({"error": str(exc)}).encode(), 500
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # keep stderr for real problems
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        # close() waits for serve_forever's next poll: a short poll, so that stopping the memory (a server's shutdown,
        # each test's teardown) does not wait out the default one
        threading.Thread(
            target=self._server.serve_forever, args=(RELAY_POLL,), name="hiveboard-memory-relay", daemon=True
        ).start()
        info = self.home / "memory-owner.json"
        tmp = info.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "port": self._server.server_address[1], "secret": secret}, f)
        os.replace(tmp, info)

    def query(self, vector: np.ndarray, n: int, **filters) -> Neighbours:
        if self.index is not None or self.acquire():
            return self.index.query(vector, n, **filters)
        import httpx  # here: only a process that does not own the index relays, and not before a search

        try:
            info = json.loads((self.home / "memory-owner.json").read_text())
            response = httpx.post(
                f"http://127.0.0.1:{info['port']}/query",
                timeout=10,
                headers={"x-hiveboard-secret": info["secret"]},
                json={"vector": [float(x) for x in vector], "n": n, **filters},
            )
            if response.status_code == 500:
                raise IndexUnavailable(f"the owner's index failed: {response.json().get('error')}")
            response.raise_for_status()
            found = response.json()
            return Neighbours([(int(i), float(s)) for i, s in found["hits"]], bool(found["more"]))
        except (OSError, ValueError, KeyError, httpx.HTTPError) as exc:
            if self.acquire():  # the owner is gone: take over
                return self.index.query(vector, n, **filters)
            raise IndexUnavailable(f"the process that owns the memory index did not answer ({exc})") from exc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            if self._lock_file is not None:
                self._lock_file.close()  # releases the lock
                self._lock_file = None
            self.index = None
