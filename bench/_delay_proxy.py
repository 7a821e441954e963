"""A TCP proxy on loopback that delivers every chunk `delay` seconds after it arrived: the network between a node
and its database when they are on separate machines, added on one machine.

Each connection has two directions, each a reader thread and a writer thread joined by a queue of (due time,
chunk): the reader stamps a chunk when it arrives, the writer sends it at its due time, in order. A chunk waits
its own delay and no longer, so the delay adds latency without capping bandwidth (a sleep per chunk in the
reader would do both), and the two directions are independent. Threads, not asyncio: an event loop's timers are
rounded to the millisecond, as large as the delays measured here.

    python bench/_delay_proxy.py --target 127.0.0.1:5432 --delay-ms 2.5 --listeners 3

prints the ports it listens on (one line, space-separated) and forwards until its stdin closes; then it prints
how late the chunks were sent beyond their delay (JSON) and exits. bench_pg_delay.py runs it so.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import queue
import socket
import sys
import threading
import time

CHUNK = 1 << 16


def loopback(host: str) -> str:
    """host when it is a loopback address; the proxy refuses anything else (it is for one machine)."""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(f"the delay proxy forwards only to a loopback address (127.0.0.1, ::1), not {host!r}")


class _Ends:
    """Counts a connection's directions as they end; the second to end closes the pair."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def last(self) -> bool:
        with self._lock:
            self._n += 1
            return self._n == 2


class DelayProxy:
    """Listens on a free loopback port; each connection accepted is forwarded to `target`, every chunk in each
    direction delivered `delay` seconds after it arrived. `late` collects, per chunk sent, how long after its due
    time it went out (the proxy's own error)."""

    def __init__(self, target: tuple[str, int], delay: float):
        if delay < 0:
            raise ValueError(f"the delay is {delay} s; it must be 0 or more")
        self.target = (loopback(target[0]), target[1])
        self.delay = delay
        self.late: list[float] = []
        self.connections = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"proxy-accept-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._sockets |= {client, upstream}
            ends = _Ends()
            for src, dst in ((client, upstream), (upstream, client)):
                q: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=self._read, args=(src, q), daemon=True).start()
                threading.Thread(target=self._write, args=(q, dst, ends, (client, upstream)), daemon=True).start()

    def _read(self, src: socket.socket, q: queue.SimpleQueue) -> None:
        while True:
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            q.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write(self, q: queue.SimpleQueue, dst: socket.socket, ends: _Ends, pair) -> None:
        while True:
            due, data = q.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
            self.late.append(time.monotonic() - due)
        try:
            dst.shutdown(socket.SHUT_WR)  # the other side's end of stream, passed on after its delay
        except OSError:
            pass
        if ends.last():  # both directions have ended: the pair is done
            self._drop(pair)

    def _drop(self, pair) -> None:
        for s in pair:
            s.close()
        with self._lock:
            self._sockets -= set(pair)

    def close(self) -> None:
        """Stop listening and cut every connection."""
        self._closed.set()
        self._server.close()
        with self._lock:
            open_now = list(self._sockets)
        for s in open_now:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def late_summary(late: list[float]) -> dict:
    """How late chunks went out beyond their delay: count, p50 and p99 in ms."""
    s = sorted(late)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")

    return {"chunks": len(s), "late_p50_ms": at(0.5), "late_p99_ms": at(0.99)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="HOST:PORT on loopback to forward to")
    p.add_argument("--delay-ms", type=float, default=0.0, help="delay added each way, ms")
    p.add_argument("--listeners", type=int, default=1, help="proxies to start (one per node), each on its own port")
    args = p.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    try:
        proxies = [DelayProxy((host, int(port)), args.delay_ms / 1000) for _ in range(args.listeners)]
    except ValueError as exc:
        p.error(str(exc))
    print(" ".join(str(proxy.port) for proxy in proxies), flush=True)
    sys.stdin.read()  # until the bench closes our stdin
    for proxy in proxies:
        proxy.close()
    print(json.dumps([late_summary(proxy.late) | {"connections": proxy.connections} for proxy in proxies]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
