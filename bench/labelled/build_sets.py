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
annotators), written where you say and not committed: `bench/bench_retrieval.py --sets /tmp/cosqa.json`
scores it. Items are the dev split's distinct snippets; queries are the pairs labelled 1, each naming
its snippet.

Two code-search sets built from public data (bench/README.md, "Code search: the memory against its own model");
`algorithms_docstrings.json` is committed, `cosqa_web.json` is not (its data licence is not ours, as for `cosqa`:
the benches skip it until it is built here):

    python bench/labelled/build_sets.py cosqa_web PATH/TO/CoCLR/.git                  # at 14ebcacf
    python bench/labelled/build_sets.py cosqa_web PATH/TO/CoCLR/.git test /tmp/t.json  # held out, not committed
    python bench/labelled/build_sets.py algorithms_docstrings PATH/TO/TheAlgorithms-Python/.git  # at f5988cc0

- `cosqa_web`: web-style questions -> Python functions. CoSQA's retrieval split (Huang et al., "CoSQA:
  20,000+ Web Queries for Code Search and Question Answering", ACL 2021; Beihang University, MSRA NLC and
  STCA NLP): repository github.com/Jun-jie-Huang/CoCLR, commit 14ebcacf9e9bc3e7109102632bc63047876f27d2,
  file data/search/cosqa-retrieval-dev-500.json (`test` reads cosqa-retrieval-test-500.json). 500 real
  Bing queries ("python check if a variable is iterable"), each paired by annotators with the Python function
  (from CodeSearchNet, docstring kept, as CoSQA gives it) that answers it; the items are the split's
  distinct functions, as written. Licence: the data is under the Computational Use of Data Agreement 1.0
  (C-UDA-1.0: use for computational purposes only; redistribution keeps this attribution and binds the
  recipient to the C-UDA; the repository's code is MIT). The JSON carries the same statement.
- `algorithms_docstrings`: docstring sentences -> functions. github.com/TheAlgorithms/Python, commit
  f5988cc09713315817df6a7e327e258013a94440, every *.py outside tests and project_euler/ (MIT, LICENSE.md).
  An item is a public top-level function whose docstring's first sentence reads as a description (4-40
  words; no doctest, parameter list or table), with the docstring removed; its query is that sentence.
  Sentences that two functions share are dropped (the label would be ambiguous), as are functions over
  ALGORITHMS_CHARS (kept whole rather than cut); DOCSTRING_ITEMS of the rest are kept, chosen by a hash of
  their path and name.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
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


COSQA_RETRIEVAL = "data/search/cosqa-retrieval-{split}-500.json"
COSQA_LICENCE = (
    "Computational Use of Data Agreement 1.0 (C-UDA-1.0), as the CoSQA data is distributed: use for "
    "computational purposes only; whoever redistributes it keeps this attribution and binds the recipient to "
    "the C-UDA. Attribution: CoSQA (Huang et al., ACL 2021), created by Beihang University, MSRA NLC group and "
    "STCA NLP group; the snippets come from CodeSearchNet's GitHub functions."
)


def build_cosqa_web(repo: Path, split: str = "dev") -> dict:
    """CoSQA's retrieval split: each of its 500 web queries names the function it was paired with."""
    commit = git(repo, "rev-parse", "HEAD").stdout.decode().strip()
    path = COSQA_RETRIEVAL.format(split=split)
    pairs = json.loads(git(repo, "show", f"{commit}:{path}").stdout)
    items: dict[str, dict] = {}
    queries = []
    for pair in pairs:
        key = f"cosqa-{pair['retrieval_idx']}"
        items.setdefault(key, {"key": key, "title": "", "text": pair["code"]})
        queries.append({"query": pair["doc"], "relevant": [key]})
    return {
        "about": f"CoSQA retrieval {split} split: web-style questions -> the Python functions annotators paired "
        "with them; every distinct function of the split is an item, as written (docstring kept); no title",
        "source": {
            "repository": "github.com/Jun-jie-Huang/CoCLR",
            "commit": commit,
            "path": path,
            "licence": COSQA_LICENCE,
        },
        "items": list(items.values()),
        "queries": queries,
    }


ALGORITHMS_CHARS = 4_000  # what record_lesson's fix= takes; longer functions are left out, not cut
DOCSTRING_ITEMS = 500
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_NOT_A_DESCRIPTION = re.compile(
    r">>>|:param|:return|\||^(args|arguments|parameters|returns?|examples?|tests?|doctests?)\b", re.I
)


def first_sentence(doc: str) -> str | None:
    """The docstring's first sentence when it reads as a description of the function, else None."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    sentence = _SENTENCE_END.split(paragraph, maxsplit=1)[0].strip()
    words = re.findall(r"[A-Za-z]{2,}", sentence)
    if not 4 <= len(sentence.split()) <= 40 or len(words) < 3 or _NOT_A_DESCRIPTION.search(sentence):
        return None
    return sentence


def without_docstring(source: str, node: ast.FunctionDef) -> str | None:
    """The function's source with its docstring's lines removed (None when they hold code too)."""
    lines = source.splitlines()
    doc = node.body[0]
    if doc.lineno == node.lineno or len(node.body) < 2:
        return None
    if lines[doc.end_lineno - 1][doc.end_col_offset :].strip() or lines[doc.lineno - 1][: doc.col_offset].strip():
        return None
    body = lines[doc.end_lineno : node.end_lineno]
    while body and not body[0].strip():  # the blank line that followed the docstring
        body.pop(0)
    kept = lines[node.lineno - 1 : doc.lineno - 1] + body
    return "\n".join(kept).rstrip() + "\n"


def build_algorithms_docstrings(repo: Path) -> dict:
    commit = git(repo, "rev-parse", "HEAD").stdout.decode().strip()
    files = git(repo, "ls-tree", "-r", "--name-only", commit).stdout.decode().splitlines()
    wanted = [
        f
        for f in files
        if f.endswith(".py")
        and not f.startswith(("project_euler/", "scripts/", "."))
        and not re.search(r"(^|/)(tests?/|test_[^/]*$|[^/]*_test\.py$|conftest\.py$)", f)
    ]
    found: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        archive = git(repo, "archive", "--format=tar", commit, "--", *wanted).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        for path in wanted:
            source = (Path(tmp) / path).read_text(errors="replace")
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in tree.body:
                if not isinstance(node, ast.FunctionDef) or node.name.startswith(("_", "test")) or node.name == "main":
                    continue
                doc = ast.get_docstring(node)
                sentence = first_sentence(doc) if doc else None
                code = without_docstring(source, node) if sentence else None
                if code and len(code) <= ALGORITHMS_CHARS:
                    found.append({"key": f"{path}::{node.name}", "query": sentence, "text": code})
    seen: dict[str, int] = {}
    for f in found:
        norm = " ".join(re.findall(r"\w+", f["query"].lower()))
        seen[norm] = seen.get(norm, 0) + 1
    unique = [f for f in found if seen[" ".join(re.findall(r"\w+", f["query"].lower()))] == 1]
    chosen = sorted(unique, key=lambda f: hashlib.sha256(f["key"].encode()).hexdigest())[:DOCSTRING_ITEMS]
    chosen.sort(key=lambda f: f["key"])
    return {
        "about": "TheAlgorithms/Python: the first sentence of a function's docstring -> that function with its "
        f"docstring removed; {DOCSTRING_ITEMS} of {len(unique)} documented top-level functions (chosen by a hash "
        "of path and name); no title",
        "source": {
            "repository": "github.com/TheAlgorithms/Python",
            "commit": commit,
            "path": "every *.py outside tests and project_euler/",
            "licence": git(repo, "show", f"{commit}:LICENSE.md").stdout.decode(),
        },
        "items": [{"key": f["key"], "title": "", "text": f["text"]} for f in chosen],
        "queries": [{"query": f["query"], "relevant": [f["key"]]} for f in chosen],
    }


def main(argv: list[str]) -> None:
    if len(argv) < 2 or (argv[0] == "cosqa" and len(argv) < 3):
        raise SystemExit(__doc__.split("\n\n")[1])  # the usage lines
    name, repo = argv[0], Path(argv[1])
    if name in ("cosqa_web", "algorithms_docstrings"):
        if name == "cosqa_web" and argv[2:3] == ["test"]:  # the held-out split: a check, written where you say
            built, target = build_cosqa_web(repo, "test"), Path(argv[3])
        else:
            built = build_cosqa_web(repo) if name == "cosqa_web" else build_algorithms_docstrings(repo)
            target = HERE / f"{name}.json"
        target.write_text(json.dumps(built, indent=1) + "\n")
        print(f"{name}: {len(built['items'])} items, {len(built['queries'])} queries -> {target}")
        return
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
