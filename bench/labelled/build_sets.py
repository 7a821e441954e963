"""Build the labelled code-search sets from fetched public repositories (deterministic).

    python bench/labelled/build_sets.py boltons PATH/TO/boltons/.git            # at 967864f8
    python bench/labelled/build_sets.py more_itertools PATH/TO/more-itertools/.git  # at 2fe1b2ee
    python bench/labelled/build_sets.py cosqa PATH/TO/CodeXGLUE/.git /tmp/cosqa.json  # a check set, not committed

Items are every public top-level function and class with a docstring in the library's modules: the
source as written (docstring included, as code-search corpora keep it), cut at ITEM_CHARS. Queries
are written by hand in `queries_<name>.json` as a developer would type them into a search box (terse,
often without the identifier), each naming one to three relevant items; the builder checks every named
item exists. The result, `<name>.json`, is committed, so the bench needs no checkout.

`cosqa` is an outside check rather than a set of ours: the CoSQA dev split (microsoft/CodeXGLUE,
Text-Code/NL-code-search-WebQuery; web-search queries paired with Python functions, labelled by
annotators). Its data licence (C-UDA) is not the repository's, so the set is written where you say and
never committed: `bench/bench_retrieval.py --sets /tmp/cosqa.json` scores it. Items are the
dev split's distinct snippets; queries are the pairs labelled 1, each naming its snippet.
"""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ITEM_CHARS = 2_000
SOURCES = {
    # name: (package dir, modules left out, key = "module.name" or just "name", licence)
    "boltons": ("boltons", {"__init__", "easterutils"}, True, "BSD-3-Clause"),
    "more_itertools": ("more_itertools", {"__init__"}, False, "MIT"),
}
REPOSITORIES = {"boltons": "github.com/mahmoud/boltons", "more_itertools": "github.com/more-itertools/more-itertools"}


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True, check=True)


def items_of(checkout: Path, package: str, skip: set[str], qualified: bool) -> list[dict]:
    items: dict[str, dict] = {}
    for path in sorted((checkout / package).glob("*.py")):
        if path.stem in skip:
            continue
        source = path.read_text()
        for node in ast.parse(source).body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc) < 30:
                continue
            key = f"{path.stem}.{node.name}" if qualified else node.name
            if key in items:  # the same name in two modules: keep the first, so a label is never ambiguous
                continue
            text = ast.get_source_segment(source, node)
            items[key] = {"key": key, "title": f"{package}.{path.stem}.{node.name}", "text": text[:ITEM_CHARS]}
    return list(items.values())


def build(name: str, repo: Path) -> dict:
    """`repo` is a git directory (a bare clone, e.g. what the fetch tool brings); its HEAD is read."""
    package, skip, qualified, licence = SOURCES[name]
    commit = git(repo, "rev-parse", "HEAD").stdout.decode().strip()
    with tempfile.TemporaryDirectory() as tmp:
        archive = git(repo, "archive", "--format=tar", commit, package).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        items = items_of(Path(tmp), package, skip, qualified)
    keys = {i["key"] for i in items}
    queries = []
    for query, relevant in json.loads((HERE / f"queries_{name}.json").read_text()):
        unknown = [k for k in relevant if k not in keys]
        if unknown:
            raise SystemExit(f"{query!r} names items that are not in {name}: {unknown}")
        queries.append({"query": query, "relevant": relevant})
    return {
        "about": f"code search over {package} ({licence}): hand-written developer queries -> the functions "
        "and classes that answer them; items loaded as task type 'code'",
        "source": {
            "repository": REPOSITORIES[name],
            "commit": commit,
            "licence": git(repo, "show", f"{commit}:LICENSE").stdout.decode(),
        },
        "items": items,
        "queries": queries,
    }


COSQA_DEV = "Text-Code/NL-code-search-WebQuery/CoSQA/cosqa-dev.json"


def build_cosqa(repo: Path) -> dict:
    commit = git(repo, "rev-parse", "HEAD").stdout.decode().strip()
    pairs = json.loads(git(repo, "show", f"{commit}:{COSQA_DEV}").stdout)
    keys: dict[str, str] = {}
    for pair in pairs:
        keys.setdefault(pair["code"], f"cosqa-{len(keys)}")
    return {
        "about": "CoSQA dev split: web queries -> the Python functions annotators matched to them (label 1); "
        "every distinct snippet of the split is an item; items loaded as task type 'code'",
        "source": {"repository": "github.com/microsoft/CodeXGLUE", "commit": commit, "path": COSQA_DEV},
        "items": [{"key": key, "title": "", "text": code[:ITEM_CHARS]} for code, key in keys.items()],
        "queries": [{"query": p["doc"], "relevant": [keys[p["code"]]]} for p in pairs if p["label"] == 1],
    }


def main(argv: list[str]) -> None:
    if len(argv) < 2 or (argv[0] == "cosqa" and len(argv) < 3):
        raise SystemExit(__doc__.split("\n\n")[1])  # the usage lines
    name, repo = argv[0], Path(argv[1])
    if name == "cosqa":
        built = build_cosqa(repo)
        Path(argv[2]).write_text(json.dumps(built) + "\n")
        print(f"cosqa: {len(built['items'])} items, {len(built['queries'])} queries -> {argv[2]}")
        return
    built = build(name, repo)
    (HERE / f"{name}.json").write_text(json.dumps(built, indent=1) + "\n")
    print(f"{name}: {len(built['items'])} items, {len(built['queries'])} queries")


if __name__ == "__main__":
    main(sys.argv[1:])
