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

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _recall_sets import load  # noqa: E402

from hiveboard.board.recall import SHAPES, classifier, held_reason  # noqa: E402

REPEATS = 3
WORDS = re.compile(r"\b(curl|wget|ignore|instructions?)\b", re.I)


def patterns_hold(text: str) -> bool:
    flat = " ".join(text.split())
    return any(pattern.search(flat) for _, pattern in SHAPES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="the table only")
    args = parser.parse_args()
    sets, missing = load()
    if missing:
        print(f"public sets not built (bench/labelled/build_recall_sets.py): {', '.join(missing)}\n")
    model = classifier()
    print(
        f"{'split':8} {'set':30} {'source':34} {'must be':7} {'items':>5} "
        f"{'patterns':>8} {'screen':>8} {'classif.':>8} {'words':>8}"
    )
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
        rates = " ".join(f"{c / n:8.1%}" for c in counts)
        print(f"{s.split:8} {s.name:30} {s.origin[:34]:34} {'held' if s.must_hold else 'passed':7} {n:5} {rates}")
    print()
    for (split, role), (n, *counts) in totals.items():
        rates = " ".join(f"{c / n:8.1%}" for c in counts)
        label = f"all {split} {role}s"
        print(f"{split:8} {label:30} {'':34} {'held' if role == 'payload' else 'passed':7} {n:5} {rates}")
    texts = [t for s in sets for t in s.texts]
    lessons = next(s.texts for s in sets if s.name == "retrieval_set.json")
    print(f"\n{'per item':39} {'patterns':>9} {'classifier':>10} {'screen':>9}")
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
            took.append(f"{best * 1e6 / len(items):6.0f} µs")
        print(f"{label:26} ({len(items):4} items) " + " ".join(f"{t:>9}" for t in took))
    if args.quiet:
        return
    for title, found in (("held-out payloads that passed", missed), ("honest items held", false)):
        shown = [f for f in found if f[0] == "heldout" or title.startswith("honest")]
        print(f"\n{title}: {len(shown)}")
        for split, name, t in shown:
            print(f"  - [{split} {name}] {' '.join(t.split())[:140]} | {held_reason(t)}")


if __name__ == "__main__":
    main()
