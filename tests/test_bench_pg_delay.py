"""bench/bench_pg_delay.py's own parts. Its delay proxy (bench/_delay_proxy.py), the network it puts between each
node and PostgreSQL: what goes through arrives intact, in order, both ways, and never before its delay; the end of
a stream passes through; it forwards to loopback only. Its count of events: a message received twice or by the
wrong agent, one never received, and a wait its wake never ended are each counted, per node. (The bench itself
runs minutes of subprocesses: it is run by hand, not here.)"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _delay_proxy import DelayProxy  # noqa: E402  (bench modules: bench/ is not a package)
from bench_pg_delay import WAIT, WAKE_LATE, Wait, tally  # noqa: E402


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


NODE_OF = {"ann": 0, "bob": 1}


def test_messages_each_received_once_by_its_recipient_count_nothing_lost():
    acked = {1: ("bob", 10.0), 2: ("ann", 10.0), 3: ("bob", 11.0)}
    waits = {"ann": [Wait(9.0, 10.2, [2])], "bob": [Wait(9.0, 10.1, [1]), Wait(10.1, 11.3, [3])]}
    received = {"ann": [(2, 10.2)], "bob": [(1, 10.1), (3, 11.3)]}
    events, per_node = tally(1.0, acked, received, waits, NODE_OF, {"ann": 1, "bob": 2})
    assert (events.lost, events.duplicated) == (0, 0)
    assert sorted(round(x, 6) for x in events.lat) == [0.1, 0.2, 0.3]
    assert per_node == [(1.0, 1, 1, 1, 0, 0), (1.0, 2, 2, 2, 0, 0)]


def test_a_message_twice_or_to_the_wrong_agent_is_duplicated_and_one_never_received_is_lost():
    acked = {1: ("bob", 10.0), 2: ("bob", 10.0), 3: ("ann", 10.0)}
    received = {"ann": [(1, 10.5)], "bob": [(1, 10.1), (1, 10.2)]}  # 1 twice to bob, once to ann; 2 and 3 never
    waits = {"ann": [Wait(9.0, 10.5, [1])], "bob": [Wait(9.0, 10.1, [1]), Wait(10.1, 10.2, [1])]}
    events, per_node = tally(0.0, acked, received, waits, NODE_OF, {"ann": 1, "bob": 2})
    assert (events.lost, events.duplicated) == (2, 2)
    assert per_node == [(0.0, 1, 1, 0, 0, 1), (0.0, 2, 2, 1, 0, 1)]


def test_a_wait_that_ran_out_with_a_message_published_long_before_missed_its_wake():
    published = 100.0
    late = Wait(published - 1, published + WAKE_LATE + 1, [1])  # ended long after the publish...
    late.started = late.ended - WAIT  # ...at the end of its full wait: nothing woke it
    on_time = Wait(published + 50 - WAIT, published + 50, [2])  # ran out too, but 2 came in its last moment
    acked = {1: ("bob", published), 2: ("bob", published + 50 - WAKE_LATE / 2)}
    received = {"ann": [], "bob": [(1, late.ended), (2, on_time.ended)]}
    events, per_node = tally(2.5, acked, received, {"ann": [], "bob": [late, on_time]}, NODE_OF, {"bob": 2})
    assert (events.lost, events.duplicated) == (1, 0)
    assert per_node[1] == (2.5, 2, 2, 2, 1, 0)
