"""The web board page: its render time for 1,000 cards, in-process and over HTTP, next to a baseline measured
in the same run.

    .venv/bin/python bench/bench_web.py            # full run
    .venv/bin/python bench/bench_web.py --quick    # smoke run (mostly interpreter starts)
    .venv/bin/python bench/bench_web.py --runs 100 --json out.json

One data directory seeded with 1,000 cards (bench/_web_board.py), then one real `hiveboard serve --http`
subprocess on it. What open pages cost the server, and how soon a card moves on them, is bench_web_live.py's.

(a) In-process, exactly what the /board route runs (`board.views.column` for each of `pages.COLUMNS`,
    `board.views.choices()`, `pages.board_page`), next to the baseline of the column reads alone; also the
    render alone, the filtered board, and every one of the 1,000 cards through `pages.card` (the page itself
    shows 50 cards per column, "more…" pages on).
(b) Over HTTP, logged in as a person (POST /login with the token, the session cookie after): GET /board,
    filtered boards, a column's second page, /board/counts and a card page with history and a thread, next
    to GET /health on the same server; with the server's CPU time per request (/proc/<pid>/stat). Before it
    the server is let settle (the memory opens and indexes in the background at start).

Target (issue 13): the board page for 1,000 cards rendered server-side <= 100 ms on this machine. Printed as
met or not; nothing is asserted (a bench prints, it does not fail).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass, field

from _harness import (
    Col,
    LoggedServer,
    bench_parser,
    finish,
    loadavg,
    machine_info,
    machine_line,
    pct,
    scratch,
    table,
)
from _web_board import login, seeded, settle, start_server


@dataclass
class TimeRow:
    name: str
    n: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    ratio: float | None = None  # p50 over the baseline's p50
    cpu_ms: float | None = None  # CPU per run: this process (in-process rows) or the server (HTTP rows)
    bytes: int | None = None
    cards: int | None = None


def _row(
    name: str, lat: list[float], cpu_s: float | None = None, nbytes: int | None = None, cards: int | None = None
) -> TimeRow:
    n = len(lat)
    return TimeRow(
        name=name,
        n=n,
        p50_ms=pct(lat, 50),
        p99_ms=pct(lat, 99),
        mean_ms=sum(lat) / n * 1000 if n else 0,
        cpu_ms=cpu_s / n * 1000 if cpu_s is not None and n else None,
        bytes=nbytes,
        cards=cards,
    )


def render_in_process(board, runs: int, all_ids: list[int]) -> list[TimeRow]:
    """What board_view runs, called directly, in rounds (each case once per round)."""
    from hiveboard.server.web import pages
    from hiveboard.server.web.pages import Viewer

    viewer = Viewer("lee", "c" * 40, False)
    plain = {"type": None, "agent": None, "label": None}
    by_type = {**plain, "type": "code"}
    by_label = {**plain, "label": "api"}

    def reads(f):
        return [board.views.column(s, task_type=f["type"], agent=f["agent"], label=f["label"]) for s in pages.COLUMNS]

    def page(f):  # server/web/app.py board_view, minus the request
        return pages.board_page(reads(f), f, board.views.choices(), viewer, None)

    cols, choices = reads(plain), board.views.choices()

    def every_card():
        return "".join(
            pages.card(c) for k in range(0, len(all_ids), 500) for c in board.views.cards(all_ids[k : k + 500])
        )

    cases = [
        ("reads: 6 columns (baseline)", lambda: reads(plain)),
        ("reads: 6 columns + choices", lambda: (reads(plain), board.views.choices())),
        ("  choices alone", board.views.choices),
        ("board page (reads + render)", lambda: page(plain)),
        ("  render alone (board_page)", lambda: pages.board_page(cols, plain, choices, viewer, None)),
        ("board page ?type=code", lambda: page(by_type)),
        ("  reads alone ?type=code", lambda: reads(by_type)),
        ("board page ?label=api", lambda: page(by_label)),
        ("all 1,000 cards: views.cards + card()", every_card),
    ]
    lat = {name: [] for name, _ in cases}
    cpu = {name: 0.0 for name, _ in cases}
    out = {}
    for fn in (fn for _, fn in cases):  # warm-up
        fn()
    for _ in range(runs):
        for name, fn in cases:
            c0, t0 = time.process_time(), time.perf_counter()
            out[name] = fn()
            lat[name].append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    rows = []
    for name, _ in cases:
        result = out[name]
        nbytes = len(result.encode()) if isinstance(result, str) else None
        ncards = result.count('class="card ') if isinstance(result, str) else None
        rows.append(_row(name, lat[name], cpu[name], nbytes, ncards))
    base = rows[0].p50_ms
    for r in rows:
        r.ratio = r.p50_ms / base if base else None
    return rows


def render_http(
    server: LoggedServer, cookie: str, runs: int, history_card: int, todo_after: str | None
) -> list[TimeRow]:
    """GET each URL in blocks (rounds through all of them), with the server's CPU time per block."""
    import httpx

    urls = [
        ("GET /health (baseline)", "/health"),
        ("GET /board", "/board"),
        ("GET /board?type=code", "/board?type=code"),
        ("GET /board?label=api", "/board?label=api"),
        (
            "GET /board/column/todo (more…)",
            f"/board/column/todo?{httpx.QueryParams({'after': todo_after})}" if todo_after else "/board/column/todo",
        ),
        ("GET /board/counts?type=code", "/board/counts?type=code"),
        (f"GET /task/{history_card} (history, thread)", f"/task/{history_card}"),
    ]
    rounds = 5
    lat = {u: [] for _, u in urls}
    cpu = {u: 0.0 for _, u in urls}
    size = {}
    with httpx.Client(base_url=server.base, headers={"cookie": f"hiveboard_session={cookie}"}, timeout=60) as client:
        for _, u in urls:  # warm-up, and a check that the session works
            for _ in range(3):
                r = client.get(u)
            if r.status_code != 200 or (u.startswith("/board") and "login" in str(r.url)):
                raise RuntimeError(f"GET {u} answered {r.status_code}: {r.text[:300]}")
            size[u] = len(r.content)
        if 'id="col-todo"' not in client.get("/board").text:
            raise RuntimeError("GET /board is not the board page (is the session cookie refused?)")
        done = 0
        for k in range(rounds):
            m = runs * (k + 1) // rounds - done
            done += m
            for _, u in urls:
                s0 = server.cpu()
                for _ in range(m):
                    t0 = time.perf_counter()
                    r = client.get(u)
                    lat[u].append(time.perf_counter() - t0)
                    if r.status_code != 200:
                        raise RuntimeError(f"GET {u} answered {r.status_code}")
                cpu[u] += server.cpu() - s0
    rows = [_row(name, lat[u], cpu[u], size[u]) for name, u in urls]
    base = rows[0].p50_ms
    for r in rows:
        r.ratio = r.p50_ms / base if base else None
    return rows


def print_time_rows(title: str, rows: list[TimeRow], cpu_label: str) -> None:
    cols = [Col("measurement", 40, left=True), Col("n", 4), Col("p50 ms", 8, ".2f"), Col("p99 ms", 8, ".2f")]
    cols += [Col("mean ms", 8, ".2f"), Col("vs base", 8, ".2f", suffix="x"), Col(cpu_label, 10, ".2f")]
    cols += [Col("bytes", 8), Col("cards", 6)]
    table(
        cols,
        [(r.name, r.n, r.p50_ms, r.p99_ms, r.mean_ms, r.ratio, r.cpu_ms, r.bytes, r.cards or None) for r in rows],
        title,
    )


@dataclass
class Results:
    machine: dict
    settings: dict
    load_before: str = ""
    load_after: str = ""
    seed: dict = field(default_factory=dict)
    render: list[TimeRow] = field(default_factory=list)
    http: list[TimeRow] = field(default_factory=list)
    total_s: float = 0.0


def verdict(res: Results) -> str | None:
    page = next((r for r in res.render if r.name.startswith("board page (")), None)
    get = next((r for r in res.http if r.name == "GET /board"), None)
    if page is None:
        return None
    ok = page.p50_ms <= 100 and (get is None or get.p50_ms <= 100)
    within = page.p99_ms <= 100 and (get is None or get.p99_ms <= 100)
    return (
        f"target board page for {res.settings['cards']} cards rendered server-side <= 100 ms: "
        f"{'MET' if ok else 'NOT MET'} at p50, {'and' if within else 'NOT'} at p99 (in-process p50 "
        f"{page.p50_ms:.1f} / p99 {page.p99_ms:.1f} ms, {page.cpu_ms:.1f} ms CPU"
        + (
            f"; GET /board p50 {get.p50_ms:.1f} / p99 {get.p99_ms:.1f} ms, {get.cpu_ms:.1f} ms server CPU"
            if get
            else ""
        )
        + f"; the page shows {page.cards} of them, 50 per column)"
    )


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="10 runs per measurement", keep="keep the temp directory (database, server log)")
    p.add_argument("--cards", type=int, default=1000, help="cards seeded (1000)")
    p.add_argument("--runs", type=int, help="runs per render measurement (50; --quick 10)")
    args = p.parse_args(argv)
    runs = args.runs or (10 if args.quick else 50)
    started = time.perf_counter()
    res = Results(
        machine=machine_info("uvicorn", "starlette", "httpx"),
        settings=dict(cards=args.cards, runs=runs, quick=args.quick),
    )
    res.load_before = loadavg()
    print(machine_line(res.machine))
    print(f"load average at start: {res.load_before}")
    with scratch("hiveboard-bench-web-", args.keep) as tmp:
        s = seeded(tmp / "home", args.cards, random.Random(13))
        board = s.pop("board")
        res.seed = {"counts": s["counts"], "history_card": s["history_card"]}
        try:
            res.render = render_in_process(board, runs, s["ids"] + [s["history_card"]])
        finally:
            board.store.close()
        print_time_rows(
            "1a. board page, in-process (what GET /board runs, no HTTP); cpu: this process per run",
            res.render,
            "cpu ms",
        )
        with start_server(tmp / "home", tmp / "server.log") as server:
            print(f"server: pid {server.proc.pid} at {server.base}")
            cookie = login(server, s["tokens"]["lee"])
            # the server starts its memory (model, indexer over the seeded items) in the background: let it settle
            # first, so the rows time the pages rather than the start-up
            asyncio.run(settle(tmp / "home" / "hiveboard.db", limit=180, server=server))
            res.http = render_http(server, cookie, runs, s["history_card"], s["todo_after"])
        print_time_rows(
            "1b. over HTTP, logged in as a person (one keep-alive connection); cpu: the server per request",
            res.http,
            "srv cpu ms",
        )
    finish(res, started, [verdict(res)], args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
