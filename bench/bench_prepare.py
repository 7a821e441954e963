"""What a new lesson costs the memory's worker: the lessons of the next cards in claim order computed again ahead
(`Memory.prepare`), with the vectors kept for the cards' text, against embedding every card's text again.

    python bench/bench_prepare.py [--quick] [--cards 250] [--lessons 3]

In-process, on a SQLite board with embedded Chroma and the offline model (as `hiveboard serve` opens them): 50 of
bench/_memory_corpus.py's lessons, --cards cards in todo (bench_memory_path.py's), their lessons computed ahead; then
--lessons times: one new lesson, indexed, and `prepare` run until it has nothing left to do, timed (wall and this
process's CPU). Two rows per lesson, in turn:

  kept       as hiveboard runs: a card whose text is unchanged is searched again with the vector kept for that text
  re-embed   the baseline (the code before): every card's text embedded again first (its kept vector dropped
             beforehand, which is what the old code did not read)

The indexing of the lesson itself (its own embedding and upsert) is not timed.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _harness import Col, bench_parser, machine_info, machine_line, quiet_loggers, table
from _memory_load import add_items
from bench_memory_path import lesson_items, new_cards

from hiveboard.board.db import Store
from hiveboard.board.tasks import Board
from hiveboard.memory.embeddings import get_embedder
from hiveboard.memory.service import PREPARE_AHEAD, open_memory

LEAD = "bench-lead"


def again(memory, board: Board, seed: int, drop: bool) -> tuple[int, float, float]:
    """One new lesson, then `prepare` until done: (cards computed, wall s, CPU s); `drop`: the cards' kept vectors
    dropped first (the baseline)."""
    add_items(board, lesson_items(seed, 1), created_by=LEAD, batch=1)
    memory.drain()
    if drop:
        with board.store.write() as db:
            db.execute("UPDATE card_context SET digest = ''")  # no kept vector matches the card's text
    c0, t0, cards = time.process_time(), time.perf_counter(), 0
    while done := memory.prepare():
        cards += done
    return cards, time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="50 cards, one lesson", json=False)
    p.add_argument("--cards", type=int, help=f"cards in todo (250; at most {PREPARE_AHEAD} are computed again)")
    p.add_argument("--lessons", type=int, help="new lessons, each timed both ways (3)")
    args = p.parse_args(argv)
    cards = args.cards or (50 if args.quick else 250)
    lessons = args.lessons or (1 if args.quick else 3)
    quiet_loggers()
    print(machine_line(machine_info("chromadb", "onnxruntime")))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        board = Board(Store(home / "hiveboard.db"), lease_seconds=300)
        memory = open_memory(board, get_embedder(), home)
        try:
            add_items(board, lesson_items(5, 50), created_by=LEAD, batch=50)
            memory.drain()
            for card in new_cards(7, cards):
                board.create(LEAD, card)
            while memory.prepare():
                pass
            got: dict[str, list[tuple[int, float, float]]] = {"kept": [], "re-embed": []}
            for n in range(lessons):
                for mode in ("kept", "re-embed"):
                    got[mode].append(again(memory, board, 100 + 2 * n + (mode == "re-embed"), mode == "re-embed"))
        finally:
            memory.stop()
            board.store.close()
    rows = []
    for mode, runs in got.items():
        rows.append(
            (
                mode,
                len(runs),
                statistics.median(c for c, _, _ in runs),
                statistics.median(w for _, w, _ in runs),
                statistics.median(c for _, _, c in runs),
            )
        )
    table(
        [
            Col("mode", 10, left=True),
            Col("lessons", 8),
            Col("cards", 6),
            Col("wall s", 8, ".2f"),
            Col("CPU s", 8, ".2f"),
        ],
        rows,
        f"after a new lesson: the next cards' lessons computed again ({cards} cards in todo), medians",
    )
    base, kept = rows[1][4], rows[0][4]
    print(f"\nCPU a new lesson costs the worker: {kept:.2f} s kept, {base:.2f} s re-embedding ({kept / base:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
