"""What the quotas cost a write: publish_message and remember with quotas on and off, on SQLite and PostgreSQL.

    .venv/bin/python bench/bench_quotas.py              # SQLite and a throwaway PostgreSQL cluster
    .venv/bin/python bench/bench_quotas.py --quick      # fewer calls, SQLite only

Two Boards on one database, measured in alternating rounds so they share the machine's noise: one without
quotas (the baseline) and one with the default [quotas] (board/quotas.py), whose charged agent already has
`--usage` calls in its last hour, as a busy agent would (the check reads the rows of its window). Each row
is the call through the board's public method (Messages.publish, Knowledge.remember), the layer the quota
check lives in; over MCP a board tool costs ~2 ms more on top (bench_board.py), which this leaves out so
the difference shows. "+quota" is the on-minus-off difference of the p50s.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _harness import BenchError, Col, Lat, bench_parser, from_tests, machine_info, machine_line, stats, table

from hiveboard.board.db import Store
from hiveboard.board.errors import OverQuota
from hiveboard.board.knowledge import NewItem
from hiveboard.board.messages import NewMessage
from hiveboard.board.quotas import BROADCAST, MESSAGE, REMEMBER, QuotaConfig
from hiveboard.board.tasks import Board

PostgresCluster = from_tests("pg_cluster").PostgresCluster

COLS = [
    Col("store", 10, left=True),
    Col("op", 22, left=True),
    Col("calls", 6),
    Col("off p50 ms", 11, ".3f"),
    Col("on p50 ms", 10, ".3f"),
    Col("+quota ms", 10, ".3f"),
    Col("on p99 ms", 10, ".3f"),
]


def preload(board: Board, agent: str, kind: str, usage: int) -> None:
    """`usage` rows in the agent's last hour (spread over it, oldest first), as if it had been busy."""
    ts = time.time()
    with board.store.write() as db:
        db.conn.executemany(
            "INSERT INTO quota_usage (agent, kind, at, total_units, total_chars, units, chars) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(agent, kind, ts - 3500 * (usage - n) / usage, n, 500 * n, 1, 500) for n in range(1, usage + 1)],
        )


def measure(target: str, label: str, calls: int, usage: int) -> list:
    off = Board(Store(target))
    # every limit of the defaults in force, each high enough that no measured call is refused: the check does
    # the same work as at the defaults
    high = dict.fromkeys(
        ("messages_per_minute", "messages_per_hour", "broadcasts_per_minute", "broadcasts_per_hour"), 10**7
    )
    on = Board(
        Store(target),
        quotas=QuotaConfig(
            **high, remember_items_per_hour=10**7, message_mb_per_hour=10**4, remember_mb_per_hour=10**4
        ),
    )
    for board in (off, on):
        for name in ("sender", "reader"):
            board.agents.ensure(name)
    for kind in (MESSAGE, BROADCAST, REMEMBER):
        preload(on, "sender", kind, usage)
    ops = {
        "publish (direct)": lambda b: b.messages.publish(
            "sender", NewMessage(intent="info", recipient="reader", content="x" * 500)
        ),
        "publish (everyone)": lambda b: b.messages.publish(
            "sender", NewMessage(intent="info", recipient="everyone", content="x" * 500)
        ),
        "remember (1 item)": lambda b: b.knowledge.remember("sender", [NewItem(text="y" * 500, title="t")]),
    }
    tight = Board(Store(target), quotas=QuotaConfig(messages_per_hour=usage))  # the sender is at its limit
    out = []
    try:
        base = Lat()
        for _ in range(calls):
            with base.timing():
                off.store.db.execute("SELECT 1").fetchall()
        out.append([label, "one round trip", calls, stats(base)["p50_ms"], None, None, None])
        for name, op in ops.items():
            lat = {"off": Lat(), "on": Lat()}
            for n in range(calls):
                for which, board in (("off", off), ("on", on)) if n % 2 else (("on", on), ("off", off)):
                    with lat[which].timing():
                        op(board)
            a, b = stats(lat["off"]), stats(lat["on"])
            out.append([label, name, calls, a["p50_ms"], b["p50_ms"], b["p50_ms"] - a["p50_ms"], b["p99_ms"]])
        # a runaway's call past its limit: refused (rolled back) instead of written
        refused = Lat()
        for _ in range(calls):
            with refused.timing():
                try:
                    ops["publish (direct)"](tight)
                except OverQuota:
                    pass
                else:
                    raise BenchError("a call past the limit was not refused")
        past = stats(refused)
        out.append([label, "publish past its limit", calls, None, past["p50_ms"], None, past["p99_ms"], "refused"])
    finally:
        for board in (off, on, tight):
            board.store.close()
    return out


def main() -> int:
    p = bench_parser(__doc__, quick="200 calls per row, SQLite only", keep=None, json=False)
    p.add_argument("--calls", type=int, default=1000, help="calls per row and board (default 1000)")
    p.add_argument("--usage", type=int, default=1000, help="rows in the charged agent's last hour (default 1000)")
    args = p.parse_args()
    calls = 200 if args.quick else args.calls
    print(machine_line(machine_info("mcp")))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-quotas-") as tmp:
        rows += measure(str(Path(tmp) / "hiveboard.db"), "sqlite", calls, args.usage)
        if not args.quick:
            cluster = PostgresCluster(Path(tmp) / "pg")
            try:
                rows += measure(cluster.database(), "postgresql", calls, args.usage)
            finally:
                cluster.stop()
    table(COLS, rows, f"quota check per call ({args.usage} rows of usage in the charged agent's last hour)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
