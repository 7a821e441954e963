"""bench/_delay_proxy.py, the network bench_pg_delay.py puts between each node and PostgreSQL: what goes through
it arrives intact, in order, both ways, and never before its delay; the end of a stream passes through; it
forwards to loopback only."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _delay_proxy import DelayProxy  # noqa: E402  (a bench module: bench/ is not a package)


class Echo:
    """A loopback server that sends back whatever it reads, until its client ends the stream; it counts the
    streams that ended."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.ended = threading.Semaphore(0)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)
            self.ended.release()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.close()


def read_exactly(conn: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = conn.recv(n - len(got))
        assert chunk, f"the stream ended after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def test_bytes_cross_the_proxy_intact_and_in_order_both_ways(echo):
    proxy = DelayProxy(("127.0.0.1", echo.port), delay=0.001)
    sent = os.urandom(1 << 20)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as conn:
            writer = threading.Thread(
                target=lambda: [conn.sendall(sent[i : i + 1000]) for i in range(0, len(sent), 1000)]
            )
            writer.start()
            back = read_exactly(conn, len(sent))
            writer.join()
        assert back == sent
    finally:
        proxy.close()


def test_each_way_waits_at_least_the_delay(echo):
    delay = 0.05
    proxy = DelayProxy(("127.0.0.1", echo.port), delay=delay)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as conn:
            for n in range(3):
                started = time.monotonic()
                conn.sendall(b"ping %d" % n)
                assert read_exactly(conn, 6) == b"ping %d" % n
                assert time.monotonic() - started >= 2 * delay  # there and back: the delay twice
    finally:
        proxy.close()


def test_the_end_of_a_stream_passes_through(echo):
    proxy = DelayProxy(("127.0.0.1", echo.port), delay=0.01)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=60) as conn:
            conn.sendall(b"last words")
            conn.shutdown(socket.SHUT_WR)
            assert read_exactly(conn, 10) == b"last words"
            assert conn.recv(10) == b""  # the server ended its side when it saw ours end
        assert echo.ended.acquire(timeout=60)
    finally:
        proxy.close()


def test_the_proxy_forwards_to_loopback_only():
    with pytest.raises(ValueError, match="only to a loopback address"):
        DelayProxy(("192.0.2.1", 5432), delay=0.001)
    with pytest.raises(ValueError, match="must be 0 or more"):
        DelayProxy(("127.0.0.1", 5432), delay=-1)
