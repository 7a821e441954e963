"""A loop that teaches: 20 cards with a real bug each, fixed in round 2; the lessons the review mines; what a
claim is handed afterwards, and the relevance floor that separates related from unrelated lessons.

    .venv/bin/python bench/bench_lessons.py            # the 20 cards, the claim table and the floor sweep
    .venv/bin/python bench/bench_lessons.py --cards 8  # fewer cards

One process, one temp directory (removed unless --keep). A real Board, the offline memory (embedded Chroma,
the default embedding model) and a ReviewEngine with the default critics (bandit, ruff, the acceptance check
in the sandbox) behind `build_server`; in-process `mcp.Client`s: carol creates each card of
tests/critics/buggy_cards.py with its visible acceptance tests, alice submits the buggy version, waits for
the verdict, submits the fix and waits again. Printed:

1. per card: the round scores, the lesson's title and whether it names the card's kind of mistake;
2. per claim (cards like four of them, and four unrelated ones, plus the two claims of the test suite that
   expect the SQL-injection lesson): the best lessons by hybrid score, with the memory's floor switched off;
3. the floor sweep: for each floor, how many related claims still get their lesson first and how many
   unrelated claims get any lesson. The baseline is no floor (0), measured in the same run.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio
from _harness import bench_parser, call, finished_round, hand_in, in_process, quiet_loggers, remove_unless_kept

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "critics")]
from buggy_cards import CARDS, RELATED, UNRELATED, Card  # noqa: E402  (the tests' cards, not a copy)

from hiveboard.board.db import Store  # noqa: E402
from hiveboard.board.tasks import Board  # noqa: E402
from hiveboard.critics.config import ReviewConfig  # noqa: E402
from hiveboard.critics.engine import ReviewEngine, ReviewWorker  # noqa: E402
from hiveboard.memory.embeddings import get_embedder  # noqa: E402
from hiveboard.memory.service import RELEVANCE_FLOOR, open_memory  # noqa: E402

WAIT = 300
FLOORS = (None, 0.25, 0.30, 0.32, 0.35, 0.40, 0.45)  # None: no floor, the baseline
# Lessons an analyser or a model critic taught (as tests/critics/test_review_llm.py and tests/memory record them),
# and the claims that should get them: the floor must keep these too.
OTHER_LESSONS = [
    dict(
        problem='in "look up users by name": sql-injection: the query is built by string formatting from user '
        "input (caught by the sql-injection check)",
        fix="use a parameterised query with placeholders",
        title="sql-injection: the query is built by string formatting from user input",
        kind="sql-injection",
    ),
    dict(
        problem="The search endpoint built its SQL with an f-string from the request, so a quote in the name "
        "broke out of the query (SQL injection).",
        fix="Pass user values as parameters: cursor.execute('... WHERE name = ?', (name,)).",
        title=None,
        kind="sql-injection",
    ),
    dict(
        problem="eval: Use of possibly insecure function - consider using safer ast.literal_eval (caught by B307)",
        fix="parse the input with ast.literal_eval or a small parser",
        title="eval: use of possibly insecure function (main)",
        kind="eval",
    ),
]
OTHER_CLAIMS = [
    ("search users by email", "query the users table by email address", "sql-injection"),
    ("Add a /users/search endpoint", "Look users up by name in the users table.", "sql-injection"),
    ("Calculator command", "Evaluate the arithmetic expression the user types, e.g. 2 * (3 + 4).", "eval"),
]


async def loop(client_for, card: Card) -> dict:
    """One card through two rounds; its scores and verdicts, and its round-1 test failures."""
    carol, alice = client_for("carol"), client_for("alice")
    async with carol as carol, alice as alice:
        task = await call(
            carol,
            "create_task",
            title=card.title,
            description=card.description,
            task_type="code",
            acceptance_tests={"files": [{"name": f"test_{card.module}_spec.py", "content": card.spec}]},
        )
        out = {"id": task["id"], "card": card}
        for version, text in (("buggy", card.buggy), ("fixed", card.fixed)):
            await hand_in(
                alice,
                task["id"],
                output=f"{version} version",
                summary=f"{card.module}: {version}",
                artifacts=[{"name": f"{card.module}.py", "kind": "code", "content": text}],
            )
            last = await finished_round(alice, task["id"], WAIT)
            out[version] = (last["verdict"], last["synthesis"]["score"])
            if version == "buggy":
                out["failures"] = [i for c in last["critiques"] for i in c["issues"] if "::" in i["location"]]
        return out


def main_style(memory, results: list[dict]) -> None:
    """The baseline: the same loops' lessons as main wrote them (lesson_of before issue 19) — titled by the
    issue's category, the problem the failing test and the first sentence of its message, the fix the
    author's summary."""
    for r in results:
        for issue in r["failures"]:
            test = issue["location"].split("::", 1)[1]
            what = issue["description"].splitlines()[0].split(" failed", 1)[-1].lstrip(": ")
            memory.record_lesson(
                "review",
                problem=f"{test} failed: {what} (caught by the test {test})",
                fix=f"{r['card'].module}: fixed",
                task_type="code",
                title=f"{issue['category']} (code)",
            )


def claim_hits(memory, title: str, description: str, k: int = 5) -> list:
    """What Memory.context_for ranks for a claim of this card (its query: title, description, criteria), with
    no floor: each lesson scored by its first reading, as a claim scores it."""
    return memory.query(f"{title}\n{description}\n", task_type="code", kinds=["lesson"], k=k, bodies=False).hits


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, json=False)
    p.add_argument("--cards", type=int, default=len(CARDS), help=f"how many of the {len(CARDS)} cards to run")
    p.add_argument("--batch", type=int, default=4, help="cards in flight at once")
    args = p.parse_args(argv)
    quiet_loggers()
    home = Path(tempfile.mkdtemp(prefix="bench-lessons-"))
    board = Board(Store(home / "hiveboard.db"), lease_seconds=600)
    memory = open_memory(board, get_embedder(), home, relevance_floor=0)
    memory.start()
    engine = ReviewEngine(board, ReviewConfig(poll_seconds=0.1, agent_deadline=0), memory)
    worker = ReviewWorker(engine).start()
    (home / "main").mkdir()
    old_board = Board(Store(home / "main" / "hiveboard.db"))  # the baseline's lessons: a memory of their own
    old_memory = open_memory(old_board, get_embedder(), home / "main", relevance_floor=0)

    def client_for(agent: str):
        return in_process(board, agent, memory=memory, review=engine)

    results: list[dict] = []
    started = time.perf_counter()

    async def run() -> None:
        cards = CARDS[: args.cards]
        for at in range(0, len(cards), args.batch):
            async with anyio.create_task_group() as tg:
                for card in cards[at : at + args.batch]:

                    async def one(card=card):
                        results.append(await loop(client_for, card))

                    tg.start_soon(one)

    try:
        anyio.run(run)
        wall = time.perf_counter() - started
        results.sort(key=lambda r: r["id"])
        for target in (memory, old_memory):
            for lesson in OTHER_LESSONS:
                target.record_lesson(
                    "bench",
                    problem=lesson["problem"],
                    fix=lesson["fix"],
                    task_type="code",
                    title=lesson["title"],
                    tags=[lesson["kind"]],
                )
        main_style(old_memory, results)
        memory.drain()
        old_memory.drain()
        mined(board, results, wall)
        print("\n## Lessons as this version mines them")
        claims(memory)
        print("\n## Baseline: the same loops' lessons as main wrote them (category title, the author's summary as fix)")
        claims(old_memory)
    finally:
        worker.stop()
        memory.stop()
        old_memory.stop()
        board.store.close()
        old_board.store.close()
        remove_unless_kept(home, args.keep)
    return 0


def mined(board: Board, results: list[dict], wall: float) -> None:
    """Per card: its round scores and the lesson the review mined."""
    lessons: dict[int | None, list] = {}
    for item in (i for i in board.knowledge.page(0, 10_000) if i.kind == "lesson"):
        lessons[item.task_id] = lessons.get(item.task_id, []) + [item]
    print(f"\n{len(results)} cards, two rounds each, in {wall:.1f} s ({wall / max(1, len(results)):.2f} s per card)\n")
    print(f"{'card':<12} {'mistake':<26} {'round 1':>10} {'round 2':>10}  lesson title")
    named = 0
    for r in results:
        card: Card = r["card"]
        mine = lessons.get(r["id"], [])
        titles = "; ".join(i.title for i in mine) or "(none)"
        ok = any(i.title.startswith(card.kind) for i in mine)
        named += ok
        one = f"{r['buggy'][0]} {r['buggy'][1]:g}"
        two = f"{r['fixed'][0]} {r['fixed'][1]:g}"
        print(f"{card.module:<12} {card.kind:<26} {one:>10} {two:>10}  {'ok ' if ok else 'NO '}{titles}")
    items = [i for task_id, group in lessons.items() if task_id is not None for i in group]
    print(
        f"\nlessons mined: {len(items)} for {len(results)} cards; named by their kind of mistake: {named}; "
        f"distinct titles: {len({i.title for i in items})}; merged into another: "
        f"{sum(i.merged_count - 1 for i in items)}\n"
    )
    example = next((i for i in items if i.title.startswith("off-by-one")), items[0] if items else None)
    if example is not None:
        print(f"one lesson in full (#{example.id}) — {example.title}\n{example.text}")


def claims(memory) -> None:
    """Per claim, the best lesson with no floor; then, per floor, related claims that still get their lesson
    first and unrelated claims that get any lesson."""
    rows = [(t, d, kind) for t, d, kind in RELATED] + [(t, d, None) for t, d in UNRELATED] + OTHER_CLAIMS
    print(f"{'claim':<44} {'wants':<26} {'best lesson (score / similarity)':<66} first right")
    found: list[tuple[str | None, float | None, float | None, bool]] = []  # kind, its lesson's score, best, first
    for title, description, kind in rows:
        hits = claim_hits(memory, title, description)
        best = hits[0] if hits else None
        right = next((h for h in hits if kind and (h.title.startswith(kind) or kind in h.tags)), None)
        found.append(
            (
                kind,
                right.score if right else None,
                best.score if best else None,
                right is not None and hits[0].id == right.id,
            )
        )
        shown = f"{best.title[:44]} ({best.score:.3f} / {best.similarity or 0:.3f})" if best else "(nothing)"
        print(
            f"{title[:44]:<44} {kind or '(unrelated)':<26} {shown:<66} "
            f"{'' if kind is None else 'yes' if found[-1][3] else 'no'}"
        )
    related = [f for f in found if f[0]]
    unrelated = [f for f in found if not f[0]]
    wanted = sorted(f[1] for f in related if f[1] is not None)
    print(
        f"\nscore of the wanted lesson (related claims): {', '.join(f'{x:.3f}' for x in wanted)}\n"
        f"best score (unrelated claims): "
        f"{', '.join(f'{f[2]:.3f}' for f in sorted(unrelated, key=lambda f: -(f[2] or -1)) if f[2] is not None)}\n"
    )
    print(f"{'floor':>6} {'related: right lesson first':>28} {'unrelated: handed a lesson':>28}")
    for floor in FLOORS:
        low = -1.0 if floor is None else floor
        kept = sum(1 for kind, score, best, first in related if first and score is not None and score >= low)
        leaked = sum(1 for kind, score, best, first in unrelated if best is not None and best >= low)
        mark = (
            "  (no floor)" if floor is None else "  <- RELEVANCE_FLOOR" if abs(floor - RELEVANCE_FLOOR) < 1e-9 else ""
        )
        print(
            f"{'none' if floor is None else f'{floor:.2f}':>6} {kept:>22} of {len(related):<3} {leaked:>22} of "
            f"{len(unrelated):<3}{mark}"
        )


if __name__ == "__main__":
    sys.exit(main())
