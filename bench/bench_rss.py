"""Memory (RSS): the server through 500 reviews, `hiveboard reindex` through 100k items, the indexing worker
embedding long items.

    .venv/bin/python bench/bench_rss.py                       # 500 reviews, a reindex of 100k items, 512 long items
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
3. Indexing, in this process (--indexing-items, 512): RSS sampled every 50 ms while the indexing worker embeds
   and indexes long items (each fills the model's 256 tokens), then while `reindex` rebuilds the index from
   SQLite (stored vectors reused, nothing embedded); start, peak, end. The process holds the bench's own data.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
from _harness import (
    Col,
    LoggedServer,
    RssSampler,
    bench_parser,
    call,
    finished_round,
    hand_in,
    hiveboard_cmd,
    http_client,
    machine_info,
    machine_line,
    parse_count,
    rss_mb,
    scratch,
    server_env,
    status_mb,
    table,
    write_json,
)
from _review_cards import CLEAN, INSECURE, OUTPUT

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board

LIMIT_MB = 1000
CLIENTS = 4

# ----------------------------------------------------------------------------- 1. reviews


async def review(client, task_id: int, source: str, n: int) -> str:
    await hand_in(
        client,
        task_id,
        output=OUTPUT.format(n=n),
        summary=f"token bucket rate limiter, card {n}",
        artifacts=[{"name": f"ratelimit_{n}.py", "kind": "code", "content": source % n}],
    )
    return (await finished_round(client, task_id, 600))["verdict"]


async def drive(url: str, tokens: list[str], reviews: int, pid: int, progress: list) -> int:
    done = 0
    lock = anyio.Lock()
    next_card = iter(range(10**9))

    async def client_loop(token: str) -> None:
        nonlocal done
        async with http_client(url, token, timeout=120) as client:
            while True:
                async with lock:
                    if done >= reviews:
                        return
                    n = next(next_card)
                card = await call(
                    client,
                    "create_task",
                    title=f"Rate-limit the public API ({n})",
                    task_type="code",
                    description="Add a per-client token bucket in front of the public API.",
                )
                verdicts = [await review(client, card["id"], INSECURE if n % 3 == 0 else CLEAN, n)]
                if verdicts[-1] == "FAIL":  # back with its author: hand in the fixed version
                    verdicts.append(await review(client, card["id"], CLEAN, n))
                async with lock:
                    before, done = done, done + len(verdicts)
                    if done // 100 > before // 100:
                        rss = status_mb(pid, "VmRSS")
                        progress.append((done, rss))
                        print(
                            f"  {done} reviews: server RSS {rss:.0f} MB (high-water mark "
                            f"{status_mb(pid, 'VmHWM'):.0f} MB)",
                            flush=True,
                        )

    async with anyio.create_task_group() as tg:
        for token in tokens:
            tg.start_soon(client_loop, token)
    return done


def reviews_rss(reviews: int, tmp: Path) -> dict:
    home = tmp / "serve"
    board = Board(Store(home / "hiveboard.db"))
    tokens = [board.agents.new_token(f"dev-{i}") for i in range(CLIENTS)]
    try:
        with LoggedServer(tmp / "serve.log", stop_timeout=30) as server:
            server.start(
                hiveboard_cmd("serve", "--http", "--port", str(server.port)),
                server_env(home, HIVEBOARD_HOME=str(home)),
                timeout=300,
            )
            pid = server.proc.pid
            started = status_mb(pid, "VmRSS")
            progress: list = []
            t0 = time.perf_counter()
            with RssSampler(pid) as sampler:
                done = anyio.run(drive, server.url, tokens, reviews, pid, progress)
                wall = time.perf_counter() - t0
                while board.knowledge.pending():  # the indexing worker catches up
                    time.sleep(0.5)
                time.sleep(5)
            return dict(
                measurement=f"hiveboard serve, {done} reviews ({CLIENTS} clients)",
                start_mb=started,
                peak_mb=status_mb(pid, "VmHWM"),
                sampled_peak_mb=sampler.peak,
                rest_mb=status_mb(pid, "VmRSS"),
                seconds=wall,
                memory_items=board.knowledge.count(),
                progress=progress,
            )
    finally:
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
    from _memory_corpus import item
    from _memory_load import add_items, real_vectors, reused_vectors

    from hiveboard.memory.embeddings import get_embedder

    embedder = get_embedder()
    items = [item(seed, i) for i in range(n)]
    real, _ = real_vectors([f"{it.title}\n{it.text}" for it in items[: min(n, n_real)]], embedder)
    board = Board(Store(home / "hiveboard.db"))
    add_items(board, items, reused_vectors(real, n, seed), embedder.name)
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
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", REINDEX_CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(home, HIVEBOARD_HOME=str(home)),
    )
    with RssSampler(proc.pid) as sampler:
        out, err = proc.communicate(timeout=7200)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"reindex failed: {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return dict(
        measurement=f"hiveboard reindex, {n} items (stored vectors)",
        start_mb=sampler.samples[0][1] if sampler.samples else float("nan"),
        peak_mb=result["peak_mb"],
        sampled_peak_mb=sampler.peak,
        rest_mb=result["rest_mb"],
        seconds=wall,
        memory_items=n,
    )


# ----------------------------------------------------------------------------- 3. indexing, in this process


def indexing_rss(n: int, tmp: Path) -> list[dict]:
    """RSS while the indexing worker embeds n long items (each fills the model's 256 tokens), then while
    `reindex` rebuilds the index from SQLite (stored vectors reused, nothing embedded)."""
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.service import open_memory

    home = tmp / "indexing"
    board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
    memory = open_memory(board, get_embedder(), home)
    long = " ".join(f"identifier_{k} retried the request after a timeout" for k in range(120))
    rows = []
    try:
        with board.store.write() as db:
            for i in range(n):
                board.knowledge.add(db, kind="message", text=f"{i} {long}", title=f"long item {i}", created_by="bench")
        gc.collect()
        for name, work in (
            (f"index {n} new long items (embedding them)", memory.drain),
            (f"reindex {n} items (stored vectors reused)", memory.reindex),
        ):
            start = rss_mb()
            t0 = time.perf_counter()
            with RssSampler(every=0.05, read=rss_mb) as sampler:
                work()
            rows.append(
                dict(
                    measurement=f"this process: {name}",
                    start_mb=start,
                    peak_mb=max(start, sampler.peak),
                    rest_mb=rss_mb(),
                    seconds=time.perf_counter() - t0,
                )
            )
            r = rows[-1]
            print(
                f"  {name}: RSS {start:.0f} -> peak {r['peak_mb']:.0f} -> {r['rest_mb']:.0f} MB ({r['seconds']:.1f} s)"
            )
    finally:
        memory.stop()
        board.store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--reviews", type=int, default=500)
    p.add_argument("--items", default="100k", help="items the reindex rebuilds (100k)")
    p.add_argument("--real", type=int, default=2000, help="of those, embedded for real (2000)")
    p.add_argument("--indexing-items", type=int, default=512, help="long items embedded in this process (512; 0 skips)")
    p.add_argument("--skip-reviews", action="store_true")
    p.add_argument("--skip-reindex", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    n_items = parse_count(args.items)
    print(f"{machine_line(machine_info('onnxruntime', 'chromadb'))}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    with scratch("hiveboard-bench-rss-", args.keep) as tmp:
        if not args.skip_reviews:
            print(f"\n[reviews] {args.reviews} reviews through hiveboard serve --http", flush=True)
            rows.append(reviews_rss(args.reviews, tmp))
        if not args.skip_reindex:
            print(f"\n[reindex] {n_items} items", flush=True)
            rows.append(reindex_rss(n_items, args.real, args.seed, tmp))
        if args.indexing_items:
            print("\n[indexing] RSS of this process while indexing (sampled every 50 ms)", flush=True)
            rows += indexing_rss(args.indexing_items, tmp)

    def target(r: dict) -> str:
        if r["measurement"].startswith("this process"):
            return "(info)"
        return f"{'PASS' if r['peak_mb'] < LIMIT_MB else 'FAIL'} (< {LIMIT_MB} MB)"

    cols = [Col("measurement", 58, left=True), Col("start MB", 8, ".0f"), Col("peak MB", 8, ".0f")]
    cols += [Col("at rest MB", 10, ".0f"), Col("seconds", 8, ".0f"), Col("target", 6, left=True)]
    print()
    table(cols, [(r["measurement"], r["start_mb"], r["peak_mb"], r["rest_mb"], r["seconds"], target(r)) for r in rows])
    print(
        "peak: the kernel's high-water mark of the process (VmHWM; in this process the highest 50 ms sample); at "
        f"rest: RSS once the work was done (reviews: every item indexed, 5 s idle); load average at end "
        f"{os.getloadavg()[0]:.2f}"
    )
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
