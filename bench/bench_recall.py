"""The recall screen (board/recall.py `held_reason`) on labelled sets split by source: what it holds back and what
it lets pass, before and after the classifier, against a word baseline, in one run.

    python bench/labelled/build_recall_sets.py MIRRORS   # once: the public sets (not committed)
    .venv/bin/python bench/bench_recall.py               # the table; then what got through and what was held
    .venv/bin/python bench/bench_recall.py --quiet       # the table only

Sets (bench/_recall_sets.py): payloads must be held, honest texts must pass. `tune` sets are what the patterns were
written against and the classifier trained on (bench/train_recall.py); `heldout` sets are other sources, never
read while tuning: their rates are the estimate of what a new payload or a new team's text meets. Columns, each
the rate that matters (held for payloads, passed for honest text):

- `patterns`: the pattern screen alone (`SHAPES`, the screen before the classifier was added);
- `screen`: what the product runs, the patterns or the classifier at its shipped threshold;
- `classifier`: the classifier alone;
- `words`: a baseline of one rule, any of "curl", "wget", "ignore" or "instructions" in the text.

Then the cost per item of the patterns, the classifier and the whole screen: one pass over every item of every set,
and the best of three over the project's lessons and notes (tests/memory/retrieval_set.json: lesson-sized texts).
"""

from __future__ import annotations

import re
import time

from _harness import Col, bench_parser, table
from _recall_sets import load

from hiveboard.board.recall import SHAPES, classifier, held_reason

REPEATS = 3
WORDS = re.compile(r"\b(curl|wget|ignore|instructions?)\b", re.I)


def patterns_hold(text: str) -> bool:
    flat = " ".join(text.split())
    return any(pattern.search(flat) for _, pattern in SHAPES)


def main() -> None:
    parser = bench_parser(__doc__, keep=None, json=False)
    parser.add_argument("--quiet", action="store_true", help="the table only")
    args = parser.parse_args()
    sets, missing = load()
    if missing:
        print(f"public sets not built (bench/labelled/build_recall_sets.py): {', '.join(missing)}\n")
    model = classifier()
    rows: list = []
    missed, false = [], []
    totals: dict[tuple[str, str], list[int]] = {}
    for s in sets:
        counts = [0, 0, 0, 0]
        for text in s.texts:
            got = (
                patterns_hold(text),
                held_reason(text) is not None,
                model.score(text) >= model.threshold,
                bool(WORDS.search(text)),
            )
            for i, g in enumerate(got):
                counts[i] += g == s.must_hold
            if got[1] != s.must_hold:
                (missed if s.must_hold else false).append((s.split, s.name, text))
        n = len(s.texts)
        total = totals.setdefault((s.split, s.role), [0, 0, 0, 0, 0])
        total[0] += n
        for i, c in enumerate(counts):
            total[i + 1] += c
        rows.append((s.split, s.name, s.origin, "held" if s.must_hold else "passed", n, *(c / n for c in counts)))
    rows.append("")
    for (split, role), (n, *counts) in totals.items():
        label = f"all {split} {role}s"
        rows.append((split, label, "", "held" if role == "payload" else "passed", n, *(c / n for c in counts)))
    cols = [Col("split", 8, left=True), Col("set", 30, left=True), Col("source", 34, left=True, clip=True)]
    cols += [Col("must be", 7, left=True), Col("items", 5)]
    cols += [Col(name, 8, ".1%") for name in ("patterns", "screen", "classif.", "words")]
    table(cols, rows)
    texts = [t for s in sets for t in s.texts]
    lessons = next(s.texts for s in sets if s.name == "retrieval_set.json")
    costs = []
    for label, items, repeats in (
        ("all sets, one pass", texts, 1),
        (f"the lessons, best of {REPEATS}", lessons, REPEATS),
    ):
        took = []
        for screen in (patterns_hold, model.score, held_reason):
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                for t in items:
                    screen(t)
                best = min(best, time.perf_counter() - start)
            took.append(f"{best * 1e6 / len(items):.0f} µs")
        costs.append((f"{label} ({len(items)} items)", *took))
    cols = [Col("per item", 39, left=True), Col("patterns", 9), Col("classifier", 10), Col("screen", 9)]
    print()
    table(cols, costs)
    if args.quiet:
        return
    for title, found in (("held-out payloads that passed", missed), ("honest items held", false)):
        shown = [f for f in found if f[0] == "heldout" or title.startswith("honest")]
        print(f"\n{title}: {len(shown)}")
        for split, name, t in shown:
            print(f"  - [{split} {name}] {' '.join(t.split())[:140]} | {held_reason(t)}")


if __name__ == "__main__":
    main()
