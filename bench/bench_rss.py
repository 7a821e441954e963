"""The server's memory (RSS) through 500 reviews, and `hiveboard reindex`'s through 100k items.

    .venv/bin/python bench/bench_rss.py                       # 500 reviews, then a reindex of 100k items
    .venv/bin/python bench/bench_rss.py --reviews 100 --items 20k --real 1000     # a shorter run
    .venv/bin/python bench/bench_rss.py --skip-reindex --json out.json

Target (issue 12): the server stays under 1 GB of RSS through 500 reviews and through a reindex of 100k items.

1. Reviews. `hiveboard serve --http` itself (review on, its defaults: bandit, ruff and the acceptance check;
   the memory with the offline model; digests) in its own process on a temp data directory. Four clients, each
   with its own agent token, create a `code` card with a ~40-line Python artifact and a ~1 KB output, claim it,
   complete it and wait for the verdict; every third artifact calls eval() (bandit FAILs it) and goes back to
   its author, who hands in a fixed one (a second review). Every review indexes its critiques and the card's
   output into memory, embedded by the server's indexing worker. The server's RSS is sampled from
   /proc/PID/status every 250 ms; printed every 100 reviews; peak = the kernel's high-water mark (VmHWM);
   at rest = RSS once every item is indexed and the server has been idle 5 s.
2. Reindex. A data directory of --items items (the memory corpus of bench_memory: the first --real embedded
   for real, the others reusing one of those vectors plus noise; vectors stored, as the server stores them),
   then the `hiveboard reindex` command (server/cli.py's main) in a fresh interpreter: Chroma rebuilt from
   SQLite. Peak = its VmHWM, at rest = its RSS when the reindex returned. A reindex after a model change
   embeds every item again; that cost is the indexing worker's (row 1, and tests/memory/test_embedding_memory.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import free_port, machine_info, payload, remove_unless_kept, stop_process  # noqa: E402
from hiveboard.board import Board, Store  # noqa: E402

LIMIT_MB = 1000
CLIENTS = 4

CLEAN = '''"""Rate limiting for the public API: a token bucket per client."""

import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    """A token bucket: `rate` tokens a second, at most `burst` at once."""

    rate: float
    burst: int
    tokens: float = field(init=False)
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def take(self, n: int = 1) -> bool:
        """Take n tokens if there are that many; say whether the request may go on."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


BUCKETS: dict[str, Bucket] = {}


def allow(client: str, rate: float = 5.0, burst: int = 10) -> bool:
    """Whether this client's request may go on now (card %d)."""
    bucket = BUCKETS.setdefault(client, Bucket(rate, burst))
    return bucket.take()
'''
INSECURE = CLEAN + '''

def configure(text: str) -> dict:
    """Read the limits from the admin form."""
    return eval(text)
'''
OUTPUT = ("Added a token-bucket rate limiter for the public API (card {n}). Each client gets a bucket of "
          "`burst` tokens refilled at `rate` per second; a request takes one token or is refused with 429. "
          "Buckets live in a module-level dict keyed by the client id; the clock is time.monotonic so a wall-"
          "clock jump cannot refill a bucket. Tested by hand with bursts of 20 requests at 5/s: the first 10 "
          "pass, the rest are refused until tokens refill. Left for later: evicting idle buckets, sharing "
          "buckets across processes (Redis), and per-route limits. ") * 2


def status_mb(pid: int | str, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1000  # kB -> MB
    return float("nan")


class Sampler:
    """RSS of a process every `every` seconds, in a thread."""

    def __init__(self, pid: int, every: float = 0.25):
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(self.every):
            try:
                self.samples.append((time.perf_counter() - t0, status_mb(self.pid, "VmRSS")))
            except OSError:
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def peak(self) -> float:
        return max((s for _, s in self.samples), default=float("nan"))


# ----------------------------------------------------------------------------- 1. reviews


def connect(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    return Client(streamable_http_client(url, http_client=http))


async def call(client: Client, tool: str, **args) -> dict:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text if result.content else result}")
    return payload(result)


async def review(client: Client, task_id: int, source: str, n: int) -> str:
    claim = await call(client, "claim_task", task_id=task_id)
    await call(client, "complete_task", task_id=task_id, token=claim["token"], output=OUTPUT.format(n=n),
               summary=f"token bucket rate limiter, card {n}",
               artifacts=[{"name": f"ratelimit_{n}.py", "kind": "code", "content": source % n}])
    trail = await call(client, "get_review", task_id=task_id, wait_seconds=600, full=True)
    last = trail["rounds"][-1]
    if last["status"] != "finished":
        raise RuntimeError(f"the review of card {task_id} did not finish: {last}")
    return last["verdict"]


async def drive(url: str, tokens: list[str], reviews: int, pid: int, progress: list) -> int:
    done = 0
    lock = anyio.Lock()
    next_card = iter(range(10 ** 9))

    async def client_loop(token: str) -> None:
        nonlocal done
        async with connect(url, token) as client:
            while True:
                async with lock:
                    if done >= reviews:
                        return
                    n = next(next_card)
                card = await call(client, "create_task", title=f"Rate-limit the public API ({n})", task_type="code",
                                  description="Add a per-client token bucket in front of the public API.")
                verdicts = [await review(client, card["id"], INSECURE if n % 3 == 0 else CLEAN, n)]
                if verdicts[-1] == "FAIL":  # back with its author: hand in the fixed version
                    verdicts.append(await review(client, card["id"], CLEAN, n))
                async with lock:
                    before, done = done, done + len(verdicts)
                    if done // 100 > before // 100:
                        rss = status_mb(pid, "VmRSS")
                        progress.append((done, rss))
                        print(f"  {done} reviews: server RSS {rss:.0f} MB (high-water mark "
                              f"{status_mb(pid, 'VmHWM'):.0f} MB)", flush=True)

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(client_loop, token)
    return done


def reviews_rss(reviews: int, tmp: Path) -> dict:
    home = tmp / "serve"
    board = Board(Store(home / "hiveboard.db"))
    tokens = [board.agents.new_token(f"dev-{i}") for i in range(CLIENTS)]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_")}
    env.update(HIVEBOARD_HOME=str(home), HIVEBOARD_CONFIG=str(home / "no-config.toml"), HIVEBOARD_LOG_LEVEL="WARNING",
               PYTHONUNBUFFERED="1")
    log = open(tmp / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "hiveboard.server", "serve", "--http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited: {(tmp / 'serve.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        started = status_mb(proc.pid, "VmRSS")
        progress: list = []
        t0 = time.perf_counter()
        with Sampler(proc.pid) as sampler:
            done = anyio.run(drive, url, tokens, reviews, proc.pid, progress)
            wall = time.perf_counter() - t0
            while board.knowledge.pending():  # the indexing worker catches up
                time.sleep(0.5)
            time.sleep(5)
        rest = status_mb(proc.pid, "VmRSS")
        hwm = status_mb(proc.pid, "VmHWM")
        items = board.knowledge.count()
        return dict(measurement=f"hiveboard serve, {done} reviews ({CLIENTS} clients)", start_mb=started,
                    peak_mb=hwm, sampled_peak_mb=sampler.peak, rest_mb=rest, seconds=wall, memory_items=items,
                    progress=progress)
    finally:
        stop_process(proc, 30)
        log.close()
        board.store.close()


# ----------------------------------------------------------------------------- 2. reindex

REINDEX_CHILD = """
import json, sys
from hiveboard.server.cli import main

def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1000

code = main(["reindex"])
print(json.dumps(dict(code=code, peak_mb=status_mb("VmHWM"), rest_mb=status_mb("VmRSS"))))
"""


def build_store(home: Path, n: int, n_real: int, seed: int) -> None:
    """n memory items with stored vectors of the offline model, as `hiveboard serve` would have left them."""
    import numpy as np
    from _memory_corpus import item

    from hiveboard.memory.embeddings import get_embedder

    embedder = get_embedder()
    items = [item(seed, i) for i in range(n)]
    real = np.vstack([embedder.embed([f"{it.title}\n{it.text}" for it in items[k:k + 8]])
                      for k in range(0, min(n, n_real), 8)])
    rng = np.random.default_rng(seed)
    board = Board(Store(home / "hiveboard.db"))
    for k in range(0, n, 1000):
        with board.store.write() as db:
            for i in range(k, min(n, k + 1000)):
                if i < len(real):
                    vec = real[i]
                else:
                    vec = real[random.Random(seed + i).randrange(len(real))] + rng.normal(0, 0.02, real.shape[1])
                    vec = (vec / np.linalg.norm(vec)).astype(np.float32)
                it = items[i]
                board.knowledge.add(db, kind=it.kind, text=it.text, created_by="bench", task_type=it.task_type,
                                    title=it.title, tags=it.tags, embedding=vec, model=embedder.name)
        if k == 0:
            board.store.optimize()
    with board.store.write() as db:
        db.execute("DELETE FROM memory_outbox")  # indexed before, as far as this store knows: reindex queues all
    board.store.optimize()
    board.store.close()


def reindex_rss(n: int, n_real: int, seed: int, tmp: Path) -> dict:
    home = tmp / "reindex"
    home.mkdir(parents=True)
    t0 = time.perf_counter()
    build_store(home, n, n_real, seed)
    print(f"  {n} items stored in {time.perf_counter() - t0:.0f} s; running `hiveboard reindex`", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEBOARD_")}
    env.update(HIVEBOARD_HOME=str(home), HIVEBOARD_CONFIG=str(home / "no-config.toml"), HIVEBOARD_LOG_LEVEL="WARNING")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", REINDEX_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    with Sampler(proc.pid) as sampler:
        out, err = proc.communicate(timeout=7200)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"reindex failed: {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return dict(measurement=f"hiveboard reindex, {n} items (stored vectors)", start_mb=sampler.samples[0][1]
                if sampler.samples else float("nan"), peak_mb=result["peak_mb"], sampled_peak_mb=sampler.peak,
                rest_mb=result["rest_mb"], seconds=wall, memory_items=n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reviews", type=int, default=500)
    p.add_argument("--items", default="100k", help="items the reindex rebuilds (100k)")
    p.add_argument("--real", type=int, default=2000, help="of those, embedded for real (2000)")
    p.add_argument("--skip-reviews", action="store_true")
    p.add_argument("--skip-reindex", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    n_items = int(float(args.items.lower().rstrip("k")) * (1000 if args.items.lower().endswith("k") else 1))
    m = machine_info("onnxruntime", "chromadb")
    print(f"machine: {m['cpu_count']} cpus, {m['implementation']} {m['python']}, onnxruntime {m['onnxruntime']}, "
          f"chromadb {m['chromadb']}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="hiveboard-bench-rss-"))
    try:
        if not args.skip_reviews:
            print(f"\n[reviews] {args.reviews} reviews through hiveboard serve --http", flush=True)
            rows.append(reviews_rss(args.reviews, tmp))
        if not args.skip_reindex:
            print(f"\n[reindex] {n_items} items", flush=True)
            rows.append(reindex_rss(n_items, args.real, args.seed, tmp))
    finally:
        remove_unless_kept(tmp, args.keep)
    print(f"\n{'measurement':<52} {'start MB':>8} {'peak MB':>8} {'at rest MB':>10} {'seconds':>8}  target")
    for r in rows:
        ok = "PASS" if r["peak_mb"] < LIMIT_MB else "FAIL"
        print(f"{r['measurement']:<52} {r['start_mb']:>8.0f} {r['peak_mb']:>8.0f} {r['rest_mb']:>10.0f} "
              f"{r['seconds']:>8.0f}  {ok} (< {LIMIT_MB} MB)")
    print("peak: the kernel's high-water mark of the process (VmHWM); at rest: RSS once the work was done "
          f"(reviews: every item indexed, 5 s idle); load average at end {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
