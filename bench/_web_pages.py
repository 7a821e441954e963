"""Open web pages for the web benches: N pages (SSE streams to GET /events, each event read and parsed, and the
fetches static/app.js makes) in a process of their own, so the pages' client work is not in the server's CPU.

    python bench/_web_pages.py --pages N --base URL [--mode board|filtered|task] [--tasks IDS] [--track]

The session cookie comes in the environment (BENCH_WEB_COOKIE), not on the command line. The process prints
"ready" once every page has said hello, then on "stop" (stdin) one JSON line: per page its events, bytes,
reloads and, with --track, when each probe card first arrived in each status. `Readers` starts and stops it.
Only httpx and asyncio here: the process must start light.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _harness import proc_cpu_seconds, stop_process

COOKIE_ENV = "BENCH_WEB_COOKIE"  # how the reader process gets the session cookie (not on its command line)
PROBE = "lat-probe"  # in the titles of the latency bench's cards: the reader tracks only these


@dataclass
class PageStats:
    events: dict = field(default_factory=dict)
    bytes: int = 0
    comments: int = 0
    bad_json: int = 0
    reloads: int = 0
    reload_errors: int = 0
    first: dict = field(default_factory=dict)  # "id:status" -> time.monotonic() of its first `cards` event


async def _reader_main(
    base: str, cookie: str, n: int, mode: str, track: bool, tasks: list[int], max_seconds: float
) -> int:
    import httpx

    stats = [PageStats() for _ in range(n)]
    hello = asyncio.Event()
    said_hello = 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stdin_watch() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=stdin_watch, daemon=True).start()
    headers = {"cookie": f"hiveboard_session={cookie}"}
    queues: list[asyncio.Queue] = []  # per page, the fetches asked for and not yet sent (someone is behind)

    async def page(i: int) -> None:
        """One open page: its own connections (a stream and one for fetches, as a browser tab has), the
        event stream read and parsed, and the fetches static/app.js makes, sent one after another."""
        nonlocal said_hello
        st = stats[i]
        fetches: asyncio.Queue = asyncio.Queue()
        queues.append(fetches)
        pending: list[asyncio.TimerHandle | None] = [None]

        async def fetcher(client) -> None:
            while True:
                path, extra = await fetches.get()
                try:
                    r = await client.get(path, headers=extra)
                    st.reloads += 1
                    if r.status_code != 200:
                        st.reload_errors += 1
                except httpx.HTTPError:
                    st.reload_errors += 1

        def reload() -> None:  # a card page: its main part again (app.js reloadMain)
            pending[0] = None
            fetches.put_nowait((f"/task/{tasks[i]}", {"x-fragment": "main"}))

        def dispatch(event: str, data: str) -> None:
            nonlocal said_hello
            st.events[event] = st.events.get(event, 0) + 1
            if event == "hello":
                said_hello += 1
                if said_hello == n:
                    hello.set()
                return
            try:
                obj = json.loads(data)
            except ValueError:
                st.bad_json += 1
                return
            if event == "cards" and track:
                at = time.monotonic()
                for c in obj["cards"]:
                    if PROBE in c["html"]:
                        st.first.setdefault(f"{c['id']}:{c['status']}", at)
            elif event == "change" and mode == "task":
                mine = tasks[i]
                if (mine in obj["tasks"] or mine in obj["reviews"] or mine in obj["threads"]) and pending[0] is None:
                    pending[0] = loop.call_later(0.15, reload)  # app.js: reloadMain(150)

        async with httpx.AsyncClient(
            base_url=base,
            headers=headers,
            limits=httpx.Limits(max_connections=2),
            timeout=httpx.Timeout(30.0, read=None),
        ) as client:
            worker = asyncio.create_task(fetcher(client))
            try:
                # app.js: a filtered board names its filter and is pushed its own `counts` events
                events_path = "/events?type=code" if mode == "filtered" else "/events"
                async with client.stream("GET", events_path, headers={"accept": "text/event-stream"}) as resp:
                    if resp.status_code != 200:
                        raise RuntimeError(f"GET /events answered {resp.status_code}")
                    event, data = None, []
                    async for line in resp.aiter_lines():
                        st.bytes += len(line) + 1
                        if not line:
                            if event is not None or data:
                                dispatch(event or "message", "\n".join(data))
                            event, data = None, []
                        elif line.startswith(":"):
                            st.comments += 1
                        else:
                            name, _, value = line.partition(":")
                            value = value.removeprefix(" ")
                            if name == "event":
                                event = value
                            elif name == "data":
                                data.append(value)
            finally:
                worker.cancel()

    readers = [asyncio.create_task(page(i)) for i in range(n)]
    waiter = asyncio.create_task(hello.wait())
    done, _ = await asyncio.wait([waiter, *readers], timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if waiter not in done:
        for t in readers:
            t.cancel()
        failed = next((t for t in done if t is not waiter and t.exception()), None)
        print(
            json.dumps(
                {
                    "error": f"pages not ready: {said_hello}/{n} said hello"
                    + (f"; {failed.exception()!r}" if failed else "")
                }
            ),
            flush=True,
        )
        return 1
    print("ready", flush=True)
    try:
        await asyncio.wait_for(stop.wait(), max_seconds)
    except TimeoutError:
        pass
    ended = [t for t in readers if t.done()]
    out = {
        "pages": [asdict(s) for s in stats],
        "streams_ended_early": len(ended),
        "backlog": sum(q.qsize() for q in queues),
    }
    print(json.dumps(out), flush=True)
    # and go: closing 50 streams and their clients takes a while and tells nothing
    sys.stdout.flush()
    os._exit(0)


class Readers:
    """N open pages (SSE streams) in a process of their own: bench/_web_pages.py --pages N."""

    def __init__(
        self,
        base: str,
        cookie: str,
        n: int,
        mode: str = "board",
        track: bool = False,
        tasks: list[int] | None = None,
        max_seconds: float = 300.0,
    ):
        self.args = [sys.executable, str(Path(__file__).resolve()), "--pages", str(n), "--base", base]
        self.args += ["--mode", mode, "--max-seconds", str(max_seconds)]
        if track:
            self.args.append("--track")
        if tasks:
            self.args += ["--tasks", ",".join(map(str, tasks))]
        self.mode = mode
        self.cookie = cookie
        self.env = {**os.environ, COOKIE_ENV: cookie}
        self.n = n
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.stderr = b""

    def start(self, timeout: float = 90.0) -> None:
        self.proc = subprocess.Popen(
            self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )

        def pump(stream, sink) -> None:
            for line in stream:
                sink(line)
            sink(None)

        threading.Thread(target=pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        err: list[str] = []
        self._err_pump = threading.Thread(
            target=pump, args=(self.proc.stderr, lambda x: err.append(x or "")), daemon=True
        )
        self._err_pump.start()
        self._err = err
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise TimeoutError(f"{self.n} pages not ready within {timeout:.0f} s") from None
        if line is None or line.strip() != "ready":
            self.kill()
            raise RuntimeError(f"reader process failed: {line!r}\n{''.join(err)[-3000:]}")

    def cpu(self) -> float:
        return proc_cpu_seconds(self.proc.pid)

    def stop(self, timeout: float = 60.0) -> dict:
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        self.kill()
        if not line:
            self._err_pump.join(timeout=10)
            raise RuntimeError(
                f"reader process ({self.n} pages, {self.mode}) gave no result, exit code "
                f"{self.proc.returncode}:\n{''.join(self._err)[-3000:]}"
            )
        return json.loads(line)

    def kill(self) -> None:
        stop_process(self.proc, 10)


def summarize_pages(result: dict) -> tuple[dict, float, float, int, int]:
    """A window's pages in brief: events per page (min, max), KB and reloads per page, streams the server ended,
    fetches still queued."""
    pages = result["pages"]
    events: dict[str, list[int]] = {}
    for p in pages:
        for name in set().union(*(q["events"] for q in pages)):
            events.setdefault(name, []).append(p["events"].get(name, 0))
    spread = {name: (min(v), max(v)) for name, v in events.items()}
    kb = sum(p["bytes"] for p in pages) / len(pages) / 1024
    reloads = sum(p["reloads"] for p in pages) / len(pages)
    bad = sum(p["bad_json"] for p in pages)
    if bad:
        print(f"  !! {bad} events with data that is not JSON")
    return spread, kb, reloads, result["streams_ended_early"], result["backlog"]


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, required=True)
    p.add_argument("--base", required=True, help="the server's base URL")
    p.add_argument("--mode", default="board", choices=("board", "filtered", "task"))
    p.add_argument("--tasks", help="comma-separated card ids, one per page (--mode task)")
    p.add_argument("--track", action="store_true", help="stamp the first arrival of each probe card's status")
    p.add_argument("--max-seconds", type=float, default=300.0)
    args = p.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: where a stuck reader is
    tasks = [int(x) for x in args.tasks.split(",")] if args.tasks else []
    return asyncio.run(
        _reader_main(args.base, os.environ[COOKIE_ENV], args.pages, args.mode, args.track, tasks, args.max_seconds)
    )


if __name__ == "__main__":
    sys.exit(main())
