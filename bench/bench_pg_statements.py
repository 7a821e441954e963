"""PostgreSQL's own time per statement of a claim-next and a completion, with the planner's statistics as hiveboard
keeps them, against the same with statistics taken afresh: what stale statistics cost the board's plans.

    python bench/bench_pg_statements.py [--quick] [--cards 1600]

A throwaway cluster on loopback (tests/pg_cluster.py) with pg_stat_statements and autovacuum off, so that the
statistics are only those hiveboard takes (at open, and each time a table doubles: board/dialect.py `grown`). Two
boards, one database each, in the same run: `kept` as hiveboard leaves them; `fresh` (the baseline) with every
table analyzed again after every 100 claims, the plans the planner would pick if it always knew the tables. On
each: --cards cards made, then a claim-next and a completion in turn until every card is done, in-process
(`Board.claim`, `Board.complete`, one client). Printed: each statement's database time (execution and planning)
per claim + completion on both boards, and each op's p50 end to end.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from _harness import Col, bench_parser, from_tests, machine_info, machine_line, quiet_loggers, table

from hiveboard.board.db import Store
from hiveboard.board.models import NewTask
from hiveboard.board.tasks import Board

PostgresCluster = from_tests("pg_cluster").PostgresCluster

SETTINGS = (
    "-c synchronous_commit=off -c autovacuum=off -c shared_preload_libraries=pg_stat_statements "
    "-c pg_stat_statements.track=all"  # the foreign-key checks too
)
FRESH_EVERY = 100  # claims between two ANALYZEs of the baseline board
TOP = 14  # statements shown


def run(cluster: PostgresCluster, cards: int, fresh: bool) -> tuple[dict[str, float], list[float], list[float]]:
    """One board's work: (database µs per claim + completion by statement, claim latencies, completion latencies)."""
    url = cluster.database()
    board = Board(Store(url), lease_seconds=300)
    try:
        for n in range(cards):
            board.create("lead", NewTask(title=f"Fix the flaky login test {n}", task_type="code"))
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            c.execute("SELECT pg_stat_statements_reset()")
            claims, completions = [], []
            for n in range(cards):
                if fresh and n % FRESH_EVERY == 0:
                    c.execute("ANALYZE")
                t0 = time.perf_counter()
                claim = board.claim("dev")
                t1 = time.perf_counter()
                board.complete("dev", claim.task.id, claim.token, output="done: the test waits for the port now")
                claims.append(t1 - t0)
                completions.append(time.perf_counter() - t1)
            found = c.execute(
                "SELECT regexp_replace(query, '\\s+', ' ', 'g'), sum(total_exec_time + total_plan_time) "
                "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND query NOT ILIKE '%pg_stat_statements%' AND query NOT ILIKE 'ANALYZE%' GROUP BY 1"
            ).fetchall()
        return {q: ms * 1000 / cards for q, ms in found}, claims, completions
    finally:
        board.store.close()


def main() -> None:
    p = bench_parser(__doc__, quick="200 cards", keep=None, json=False)
    p.add_argument("--cards", type=int, default=1600, help="cards made, then claimed and completed")
    args = p.parse_args()
    cards = 200 if args.quick else args.cards
    quiet_loggers()
    print(machine_line(machine_info("psycopg")))
    print(f"PostgreSQL settings: {SETTINGS}; {cards} cards")
    cluster = PostgresCluster(Path(tempfile.mkdtemp(prefix="bench-pgs-")), SETTINGS)
    try:
        kept, kept_claims, kept_done = run(cluster, cards, fresh=False)
        fresh, fresh_claims, fresh_done = run(cluster, cards, fresh=True)
    finally:
        cluster.stop()
    rows = sorted(set(kept) | set(fresh), key=lambda q: -max(kept.get(q, 0), fresh.get(q, 0)))[:TOP]
    table(
        [Col("statement", 72, left=True, clip=True), Col("kept µs", 9, ".1f"), Col("fresh µs", 9, ".1f")],
        [(q, kept.get(q), fresh.get(q)) for q in rows],
        "PostgreSQL's time per claim-next + completion, by statement",
    )
    print(f"all statements: kept {sum(kept.values()):.0f} µs, fresh {sum(fresh.values()):.0f} µs\n")
    table(
        [Col("op", 14, left=True), Col("kept p50 ms", 12, ".3f"), Col("fresh p50 ms", 13, ".3f")],
        [
            ("claim-next", statistics.median(kept_claims) * 1000, statistics.median(fresh_claims) * 1000),
            ("complete", statistics.median(kept_done) * 1000, statistics.median(fresh_done) * 1000),
        ],
        "end to end, one client, in-process",
    )


if __name__ == "__main__":
    main()
