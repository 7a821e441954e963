"""What each of hiveboard's dependencies costs an install: the distributions it pulls and their size on disk.

    .venv/bin/python bench/bench_install.py          # the table, for the venv this interpreter runs in

Read from the installed distributions' metadata and RECORD files (nothing is downloaded or installed). For each
direct dependency of `pip install .`: the distributions only it pulls (the whole install's set minus the set
without it, which is what leaving it out or moving it to an extra would save) and everything it pulls (shared
ones too). The baseline, measured in the same run, is the whole set. An install's time on a fresh machine
follows what it downloads and unpacks, so the sizes say where the minutes go.
"""

from __future__ import annotations

import importlib.metadata as md

from _harness import Col, bench_parser, table
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main() -> None:
    bench_parser(__doc__, keep=None, json=False).parse_args()
    dists = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}
    size = {name: sum((f.size or 0) for f in (d.files or [])) for name, d in dists.items()}

    def pulls(name: str, extras: tuple[str, ...]) -> set[tuple[str, tuple[str, ...]]]:
        found = set()
        for text in dists[name].requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                found.add((canonicalize_name(req.name), tuple(sorted(req.extras))))
        return found

    def closure(roots) -> set[str]:
        seen, todo = set(), list(roots)
        while todo:
            name, extras = todo.pop()
            if name in seen or name not in dists:
                continue
            seen.add(name)
            todo += pulls(name, extras)
        return seen

    direct = sorted(pulls("hiveboard", ()))
    whole = closure(direct)
    mb = lambda names: sum(size[n] for n in names) / 1e6  # noqa: E731
    print(f"pip install . : {len(whole)} distributions, {mb(whole):.0f} MB installed (the baseline)\n")
    rows = []
    for dep in direct:
        only = whole - closure([d for d in direct if d != dep])
        everything = closure([dep])
        rows.append((mb(only), dep[0], only, everything))
    cols = [Col("dependency", 22, left=True), Col("only it", 8), Col("MB", 7, ".1f"), Col("with shared", 13)]
    cols += [Col("MB", 7, ".1f"), Col("largest of its own", 18, left=True)]
    table(
        cols,
        [
            (name, len(only), mb(only), len(everything), mb(everything))
            + (", ".join(f"{n} {size[n] / 1e6:.0f}" for n in sorted(only, key=lambda n: -size[n])[:4]),)
            for _, name, only, everything in sorted(rows, reverse=True)
        ],
    )


if __name__ == "__main__":
    main()
