"""The offline model in a process of its own, for the work nobody waits on: indexing new items and cards.

Embedding a text holds the interpreter for its tokenizing and pooling, and the model's run takes a core; in
the serving process that work competed with every tool call (a pool message, which the indexer embeds, made
its sender's calls several times slower: bench/README.md, `bench_memory_path.py`). Here it runs in a child process
in the idle scheduling class (`priority.idle_process`), on spare CPU only: the server's interpreter only waits on a
pipe meanwhile.

The child is `python -m hiveboard.memory.embed_process`. It reads frames from stdin and writes frames to
stdout: a frame is a 4-byte big-endian length and its bytes. Its first frame says which model it loaded
(`{"name": …, "dim": …}`, or `{"error": …}`); then each request (a JSON list of texts) gets `V` and the
float32 vectors, or `E` and one sentence. It ends when its stdin closes, and with its parent on Linux
(parent-death signal). The parent starts it at the first request and starts it again when it has died (a
crash, a kill, running out of memory): the request is sent once more, and a second failure is an
EmbeddingError, so the indexer keeps its items queued and tries again later. Nothing is lost either way:
items leave the outbox only once their vectors are stored.

Only the offline model runs here; an embeddings endpoint is I/O the serving process waits on without
holding anything, so it stays in process.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, BinaryIO

from .errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("hiveboard.memory")

MAX_FRAME = 64 << 20  # a batch of texts or vectors: the indexer leases 64 items of at most ~10k characters
START_TIMEOUT = 120.0  # loading (and on a first start, quantizing) the model


def _write(stream: BinaryIO, payload: bytes) -> None:
    stream.write(struct.pack(">I", len(payload)) + payload)
    stream.flush()


def _read(stream: BinaryIO) -> bytes:
    """One frame; EOFError when the other side has gone."""
    head = stream.read(4)
    if len(head) < 4:
        raise EOFError("the other side closed the pipe")
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        raise EOFError(f"a frame of {size} bytes is over the limit")
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("the other side closed the pipe mid-frame")
    return body


class ProcessEmbedder:
    """`Embedder` of the offline model, run in a child process at low priority (see the module docstring)."""

    def __init__(self, name: str, dim: int, *, nice: int | None = None):
        """`name`/`dim`: what the serving process's own model computes; a child that loads anything else (e.g.
        its quantizing failed) is refused, since its vectors would not compare with the queries'."""
        from hiveboard.board.priority import IDLE_NICE

        self.name = name
        self.dim = dim
        self.nice = IDLE_NICE if nice is None else nice
        self._lock = threading.Lock()  # one request in flight: the child answers in order
        self._proc: subprocess.Popen | None = None
        self.starts = 0  # how many children were started (a restart counts)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "HIVEBOARD_EMBED_NICE": str(self.nice)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "hiveboard.memory.embed_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # its log lines go where ours go
            env=env,
            close_fds=True,
        )
        self.starts += 1
        try:
            hello = json.loads(self._answer(proc, START_TIMEOUT))
        except (EOFError, OSError, ValueError) as exc:
            self._end(proc)
            raise EmbeddingError(f"the embedding worker process did not start ({exc})") from exc
        if "error" in hello:
            self._end(proc)
            raise EmbeddingError(f"the embedding worker process could not load the model: {hello['error']}")
        if (hello.get("name"), hello.get("dim")) != (self.name, self.dim):
            self._end(proc)
            raise EmbeddingError(
                f"the embedding worker process loaded {hello.get('name')!r}, not this server's {self.name!r}"
            )
        log.info("embedding worker process %s started (%s)", proc.pid, self.name)
        return proc

    def _answer(self, proc: subprocess.Popen, timeout: float | None = None) -> bytes:
        """The child's next frame, waiting at most `timeout` seconds for it (None: as long as it lives)."""
        if timeout is None:
            return _read(proc.stdout)
        box: list = []
        reader = threading.Thread(target=lambda: box.append(self._try_read(proc)), daemon=True)
        reader.start()
        reader.join(timeout)
        if not box:
            proc.kill()  # unblocks the reader
            reader.join()
            raise EOFError(f"no answer within {timeout:.0f} s")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    @staticmethod
    def _try_read(proc: subprocess.Popen) -> bytes | BaseException:
        try:
            return _read(proc.stdout)
        except (EOFError, OSError) as exc:
            return exc

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 rows, as the serving process's own model would give them."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        request = json.dumps([t or " " for t in texts]).encode()
        with self._lock:
            for attempt in (1, 2):
                if self._proc is None or self._proc.poll() is not None:
                    if self._proc is not None:
                        log.warning("the embedding worker process exited (%s); starting another", self._proc.returncode)
                        self._end(self._proc)
                        self._proc = None
                    self._proc = self._start()
                try:
                    _write(self._proc.stdin, request)
                    answer = self._answer(self._proc)
                except (EOFError, OSError) as exc:
                    self._end(self._proc)
                    self._proc = None
                    if attempt == 2:
                        raise EmbeddingError(f"the embedding worker process died twice on one batch ({exc})") from exc
                    log.warning("the embedding worker process died (%s); starting another", exc)
                    continue
                if answer[:1] == b"E":
                    raise EmbeddingError(answer[1:].decode("utf-8", "replace"))
                vectors = np.frombuffer(answer[1:], dtype=np.float32)
                if vectors.size != len(texts) * self.dim:
                    self._end(self._proc)
                    self._proc = None
                    raise EmbeddingError("the embedding worker process answered a batch of the wrong size")
                return vectors.reshape(len(texts), self.dim)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._end(self._proc)
                self._proc = None


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends (a kill -9 of the server leaves no worker behind)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent is already gone
            os._exit(0)
    except (OSError, AttributeError):
        pass


def main() -> int:
    """The child: load the model, then answer requests until stdin closes."""
    from hiveboard.board.priority import IDLE_NICE, idle_process

    _die_with_parent()
    try:
        nice = int(os.environ.get("HIVEBOARD_EMBED_NICE", IDLE_NICE))
    except ValueError:
        nice = IDLE_NICE
    idle_process(nice)
    out = os.fdopen(os.dup(1), "wb")  # the protocol's stdout; anything a library prints goes to stderr
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    try:
        from .embeddings import get_embedder

        embedder = get_embedder()
        hello = {"name": embedder.name, "dim": embedder.dim}
    except Exception as exc:  # say why, rather than die silently
        _write(out, json.dumps({"error": str(exc)}).encode())
        return 1
    _write(out, json.dumps(hello).encode())
    while True:
        try:
            request = _read(inp)
        except EOFError:
            return 0
        try:
            texts = json.loads(request)
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError("a request is a JSON list of texts")
            vectors = embedder.embed(texts)
            _write(out, b"V" + vectors.astype("float32").tobytes())
        except Exception as exc:
            _write(out, b"E" + f"embedding failed: {exc}".encode())


if __name__ == "__main__":
    sys.exit(main())
