"""Lessons from a review loop: what the author changed between a failing round and the passing one.

A blocking issue raised in round N-1 and resolved in round N is a mistake someone fixed. The fix is read
from the submitted files of the two rounds (a unified diff, text only: the server never imports or runs
submitted code), and a small classifier names the shape of each change — off-by-one, wrong operator,
wrong comparison, missing empty-input or None check, wrong variable, missing return, exception type,
missing edge case. A lesson is then: a title naming the mistake ("off-by-one in range end (sum_to)"), the
problem (the failing test and the gist of its message, never a traceback or a path), and the fix (the
change: "changed `range(1, n)` to `range(1, n + 1)` in sum_to"). Different tests fixed by one change make
one lesson; the caller leaves out issues of the card's hidden acceptance tests.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from hiveboard.board.models import AcceptanceTests, Artifact
from hiveboard.board.review_models import ReviewIssue

from .base import is_test_file
from .synthesis import said_once

DIFF_CHARS = 1500  # of unified diff kept with a lesson
SNIPPET = 70  # characters of code quoted from one side of a change
PATHS = re.compile(r"(?:[\w.~-]*/)+[\w.-]+(?::\d+)?|\b[\w.-]+\.py:\d+\b")  # file paths and file:line
# an f-string's opening is a token of its own, so what its braces hold is compared token by token
TOKEN = re.compile(
    r"""[fF][rR]?['"]|[rbuRBU]{0,2}(?:'[^'\n]*'|"[^"\n]*")|\d+(?:\.\d+)?|[A-Za-z_]\w*|\*\*|//|==|!=|"""
    r"<=|>=|->|\S"
)
STRING = re.compile(r"""[rbuRBU]{0,2}(?:'.*'|".*")""")
DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")
OPEN, CLOSE = "([{", ")]}"
ARITHMETIC = {"+", "-", "*", "/", "//", "%", "**"}
COMPARISON = {"<", ">", "<=", ">=", "==", "!="}
BOUNDARY = {frozenset({"<", "<="}), frozenset({">", ">="})}  # one step past or short of the bound
# acceptance-check issues: a test or a command failed; their category says nothing about the mistake
OUTCOME = re.compile(r"^(?:failed|error)\b")  # how a failing test's description begins (critics/acceptance.py)
TEST_CATEGORIES = {"test-failed", "test-error", "acceptance-failed", "acceptance-limit", "acceptance-timeout"}


def sentence(text: str, limit: int = 220) -> str:
    """The first sentence of the first meaningful line, without paths, cut to `limit`."""
    line = next(
        (
            x.strip()
            for x in text.splitlines()
            if x.strip() and not x.lstrip().startswith((">", "E ", "Traceback", 'File "'))
        ),
        "",
    )
    line = re.sub(r"\s+(?:at|in|from)\s*(?=[.,;:)]|$)", "", PATHS.sub("", line))
    line = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0].strip(" -—:;,")
    return _cut(line, limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- what changed


@dataclass
class Change:
    """One changed place between two versions of a file, classified."""

    kind: str  # off-by-one, wrong operator, …; "change" when no known shape fits
    title: str  # the mistake in words, without the place: "off-by-one in range end"
    before: str  # the changed code as it was ("" for an addition)
    after: str  # as it is now ("" for a removal)
    function: str  # the enclosing function, else the file's name
    line: int  # 1-based line of the change in the old file
    file: str = ""

    def gist(self) -> str:
        if self.before and self.after:
            return f"changed `{self.before}` to `{self.after}`"
        return f"added `{self.after}`" if self.after else f"removed `{self.before}`"


def _texts(artifacts: list[Artifact]) -> dict[str, str]:
    return {a.name: a.content for a in artifacts if a.kind not in ("link", "diff")}


def changed_files(before: list[Artifact], after: list[Artifact]) -> list[tuple[str, str, str]]:
    """(name, old, new) of the files that differ; the code under test first, the author's own tests after
    (a fix is in the code; a test changed with it explains less)."""
    old, new = _texts(before), _texts(after)
    names = [n for n in dict.fromkeys([*new, *old]) if old.get(n, "") != new.get(n, "")]
    kinds = {a.name: a.kind for a in [*before, *after]}
    names.sort(key=lambda n: is_test_file(n, kinds.get(n, "code")))
    return [(n, old.get(n, ""), new.get(n, "")) for n in names]


def unified_diff(files: list[tuple[str, str, str]], limit: int = DIFF_CHARS) -> str:
    """A unified diff of the changed files (one line of context), cut to `limit` characters."""
    parts = []
    for name, old, new in files:
        parts += difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{name}", f"b/{name}", n=1, lineterm="")
    text = "\n".join(parts)
    return text if len(text) <= limit else text[:limit].rsplit("\n", 1)[0] + "\n… (cut)"


def changes(files: list[tuple[str, str, str]]) -> list[Change]:
    """Every changed place of the changed files, classified."""
    found = []
    for name, old, new in files:
        a, b = old.splitlines(), new.splitlines()
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            removed = [x for x in a[i1:i2] if x.strip()]
            added = [x for x in b[j1:j2] if x.strip()]
            if not removed and not added:
                continue
            where = _function(b, j1) if added else _function(a, i1)
            change = classify(removed, added, where or PurePosixPath(name).name, i1 + 1)
            change.file = name
            found.append(change)
    return found


def _function(lines: list[str], at: int) -> str | None:
    """The function a line belongs to: the line's own `def`, or the nearest one above it that is less indented;
    None at module level."""
    if not lines:
        return None
    at = min(at, len(lines) - 1)
    indent = len(lines[at]) - len(lines[at].lstrip())
    for n in range(at, -1, -1):
        line = lines[n]
        found = DEF.match(line)
        if found and (n == at or len(found.group(1)) < indent):
            return found.group(2)
        if n != at and line.strip() and not line[0].isspace():
            return None  # reached a module-level statement that is not a def
    return None


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def _around(text: str, start: int, end: int) -> str:
    """The code around a changed span: the innermost bracketed call or subscript holding it (with the name
    before it), else its line; short."""
    depth, left = 0, None
    for i in range(start - 1, -1, -1):
        if text[i] in CLOSE:
            depth += 1
        elif text[i] in OPEN:
            if depth == 0:
                left = i
                break
            depth -= 1
    if left is not None and text[left] != "\n":
        depth, right = 0, None
        for i in range(max(end, left + 1), len(text)):
            if text[i] in OPEN:
                depth += 1
            elif text[i] in CLOSE:
                if depth == 0:
                    right = i
                    break
                depth -= 1
        if right is not None and "\n" not in text[left:right]:
            name = re.search(r"[\w.]*$", text[:left]).group()
            snippet = text[left - len(name) : right + 1]
            if len(snippet) <= SNIPPET:
                return snippet
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    return _cut(text[line_start : line_end if line_end >= 0 else len(text)].strip(), SNIPPET)


def _one_line(lines: list[str]) -> str:
    """Inserted lines quoted as one: `if not items: return 0`."""
    return _cut("; ".join(x.strip() for x in lines).replace(":;", ":"), SNIPPET)


GUARD_EMPTY = re.compile(
    r"\bif\s+(?:not\s+\w+|len\(\s*\w+\s*\)\s*(?:==\s*0|<\s*1)|\w+\s*==\s*(?:\[\]|''|\"\"|\{\}|\(\)))"
)
GUARD_NONE = re.compile(r"\bif\s+\w+\s+is\s+None\b|\bif\s+\w+\s+is\s+not\s+None\b")


def classify(removed: list[str], added: list[str], function: str, line: int) -> Change:
    """Name the shape of one change from the lines it removed and added."""
    if not removed:
        return _addition(added, function, line)
    if not added:
        return Change("extra statement", "extra statement", _one_line(removed), "", function, line)
    old, new = "\n".join(x.strip() for x in removed), "\n".join(x.strip() for x in added)
    a, b = _tokens(old), _tokens(new)
    ops = [
        op
        for op in difflib.SequenceMatcher(
            None, [t for t, _, _ in a], [t for t, _, _ in b], autojunk=False
        ).get_opcodes()
        if op[0] != "equal"
    ]
    if not ops:  # only whitespace moved
        return Change("change", "layout", _one_line(removed), _one_line(added), function, line)
    kinds = [_token_change(a, b, op, new) for op in ops]
    _, i1, i2, j1, j2 = ops[0]
    lo_a = a[i1][1] if i1 < len(a) else len(old)
    hi_a = a[i2 - 1][2] if i2 > i1 else lo_a
    lo_b = b[j1][1] if j1 < len(b) else len(new)
    hi_b = b[j2 - 1][2] if j2 > j1 else lo_b
    before, after = _around(old, lo_a, hi_a), _around(new, lo_b, hi_b)
    if len(ops) > 1:  # several edits: one of them names the whole if they agree, else a plain change
        before, after = _cut(old.replace("\n", "; "), SNIPPET), _cut(new.replace("\n", "; "), SNIPPET)
    if all(k is not None and k[0] == kinds[0][0] for k in kinds):  # every edit has the same known shape
        kind, title = kinds[0]
        return Change(kind, title, before, after, function, line)
    if len(added) > len(removed) and any(GUARD_EMPTY.search(x) or GUARD_NONE.search(x) for x in added):
        return _addition(added, function, line, before=_one_line(removed))
    return Change("change", "", before, after, function, line)


def _guard(condition: str) -> tuple[str, str] | None:
    """(kind, title) of an added condition that checks for None or for empty input."""
    if GUARD_NONE.search(condition):
        return "missing check", "missing None check"
    if GUARD_EMPTY.search(condition) or re.fullmatch(r"if \w+", condition.strip()):
        return "missing check", "missing empty-input check"
    return None


def _addition(added: list[str], function: str, line: int, before: str = "") -> Change:
    text = _one_line(added)
    first = added[0].strip()
    if guard := _guard(first):
        return Change(*guard, before, text, function, line)
    if first.startswith("return ") or first == "return":
        return Change("missing return", "missing return", before, text, function, line)
    if first.startswith(("if ", "elif ")):
        return Change("missing edge case", "missing edge case", before, text, function, line)
    if first.startswith(("try:", "except")):
        return Change("missing error handling", "missing error handling", before, text, function, line)
    return Change("missing step", "missing step", before, text, function, line)


def _context(tokens: list[tuple[str, int, int]], at: int) -> str | None:
    """Where a token sits, when that is a bound: range(...) (start, end or step), a subscript or a slice, or
    beside a comparison; None elsewhere."""
    depth = 0
    for k in range(at - 1, -1, -1):
        tok = tokens[k][0]
        if tok in CLOSE:
            depth += 1
        elif tok in OPEN:
            if depth:
                depth -= 1
                continue
            if tok == "[":
                inside = [t for t, _, _ in tokens[k + 1 : at]]
                return "slice" if ":" in inside else "index"
            if tok == "(" and k and tokens[k - 1][0] == "range":
                commas = sum(1 for t, _, _ in tokens[k + 1 : at] if t == ",")
                rest = [t for t, _, _ in tokens[at:]]
                closing = rest.index(")") if ")" in rest else len(rest)
                last = "," not in rest[:closing]
                return "range end" if last else "range start" if commas == 0 else "range step"
            break
    near = {t for t, _, _ in tokens[max(0, at - 3) : at + 3]}
    return "comparison" if near & COMPARISON else None


def _off_by_one(tokens: list[tuple[str, int, int]], at: int) -> tuple[str, str]:
    where = _context(tokens, at)
    return "off-by-one", f"off-by-one in {where}" if where else "off-by-one"


def _token_change(
    a: list[tuple[str, int, int]], b: list[tuple[str, int, int]], op: tuple, new_text: str
) -> tuple[str, str] | None:
    """(kind, title) of one token-level edit, or None when it has no known shape."""
    tag, i1, i2, j1, j2 = op
    old, new = [t for t, _, _ in a[i1:i2]], [t for t, _, _ in b[j1:j2]]
    if tag in ("insert", "delete"):
        delta = new if tag == "insert" else old
        if len(delta) == 2 and delta[0] in ("+", "-") and delta[1] == "1":
            return _off_by_one(b, j1) if tag == "insert" else _off_by_one(a, i1)
        if delta == ["return"]:
            return "missing return", "missing return"
        if delta == ["not"]:
            return "inverted condition", "inverted condition"
        if tag == "insert" and len(delta) >= 2 and delta[0] in ("and", "or"):
            return "missing edge case", "missing condition"
        if tag == "insert" and "if" in delta and "else" in delta:  # `x / n` → `x / n if n else 0`
            condition = " ".join(delta[delta.index("if") : delta.index("else")])
            return _guard(condition) or ("missing edge case", "missing edge case")
        return None
    if len(old) == 1 and len(new) == 1:
        x, y = old[0], new[0]
        if frozenset({x, y}) in BOUNDARY:
            return "off-by-one", f"off-by-one in comparison (`{x}` where `{y}` was needed)"
        if x in COMPARISON and y in COMPARISON:
            return "wrong comparison", f"wrong comparison (`{x}` instead of `{y}`)"
        if x in ARITHMETIC and y in ARITHMETIC:
            return "wrong operator", f"wrong operator (`{x}` instead of `{y}`)"
        if {x, y} == {"and", "or"}:
            return "wrong operator", f"wrong operator (`{x}` instead of `{y}`)"
        if {x, y} == {"True", "False"} or {x, y} == {"min", "max"} or (STRING.fullmatch(x) and STRING.fullmatch(y)):
            return "wrong constant", f"wrong constant (`{x}` instead of `{y}`)"
        if _number(x) is not None and _number(y) is not None:
            if abs(_number(x) - _number(y)) == 1 and _context(b, j1):
                return _off_by_one(b, j1)
            assigned = _assigned(new_text, b, j1)
            return "wrong constant", (
                f"wrong initial value (`{x}` instead of `{y}`)"
                if assigned
                else f"wrong constant (`{x}` instead of `{y}`)"
            )
        if x.isidentifier() and y.isidentifier():
            line = " ".join(t for t, _, _ in a[max(0, i1 - 3) : i1])
            if (
                x.endswith(("Error", "Exception"))
                or y.endswith(("Error", "Exception"))
                or re.search(r"\b(?:raise|except)\b", line)
            ):
                return "exception type", f"wrong exception type (`{x}` instead of `{y}`)"
            calls = j2 < len(b) and b[j2][0] == "("
            return "wrong variable", (
                f"wrong function called (`{x}` instead of `{y}`)"
                if calls
                else f"wrong variable (`{x}` instead of `{y}`)"
            )
    if tag == "replace" and len(old) == 1 and new[:1] == old and new[1:3] in (["+", "1"], ["-", "1"]):
        return _off_by_one(b, j1)
    if tag == "replace" and new == ["return", *old]:
        return "missing return", "missing return"
    return None


def _assigned(text: str, tokens: list[tuple[str, int, int]], at: int) -> bool:
    """The token is the value a name is set to on its line: `total = 0`."""
    begin = text.rfind("\n", 0, tokens[at][1]) + 1
    return re.fullmatch(r"\s*[A-Za-z_][\w.]*\s*=\s*", text[begin : tokens[at][1]]) is not None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- what failed


def hidden(issue: ReviewIssue, tests: AcceptanceTests | None) -> bool:
    """An issue the card's hidden tests shaped: no lesson tells its test's name, message, code or values. The
    critic that read them says so (`ReviewIssue.hidden`); an issue stored before critics said it is recognised
    by the check that raised it or by the test file it names."""
    if issue.hidden:
        return True
    if tests is None or not tests.hidden:
        return False
    spec = {PurePosixPath(f.name).name for f in tests.files}
    return (issue.rule or "").startswith("the card's acceptance") or PurePosixPath(
        issue.location.split("::", 1)[0]
    ).name in spec


@dataclass
class Failure:
    """One resolved blocking issue, as a lesson tells it."""

    issue: ReviewIssue
    lens: str
    test: str | None  # the failing test's name (no file), for acceptance issues
    problem: str  # "test_sums_up_to_n failed: expected 15, got 10 (`assert sum_to(5) == 15`)"
    gist: str  # the message gist alone

    @property
    def caught_by(self) -> str:
        if self.test:
            return f"the test {self.test}"
        return self.issue.rule or f"the {self.issue.category} check"


def failure(issue: ReviewIssue, lens: str) -> Failure:
    """What went wrong, in a line: for a test, its name and the gist of its message (expected against actual,
    or the error) and the failing statement; never a traceback or a path."""
    if issue.category not in TEST_CATEGORIES:
        what = sentence(issue.description)
        return Failure(issue, lens, None, f"{issue.category}: {what}" if what else issue.category, what)
    test = issue.location.split("::", 1)[1] if "::" in issue.location else None
    lines = issue.description.splitlines()
    first = lines[0] if lines else ""
    if test:
        # "failed: expected 15, got 10"; reviews stored before the location was said once begin with the test id
        gist = OUTCOME.sub("", said_once(issue.location, first).strip(), count=1)
        gist = _cut(PATHS.sub("", gist.lstrip(": ")).strip(), 160)
    else:  # a command: its first line says how it ended; the error line of its output says why
        error = next((x.strip() for x in reversed(lines[1:]) if re.match(r"\s*\w+(?:Error|Exception)\b", x)), "")
        gist = _cut(PATHS.sub("", error or sentence(first)).strip(), 160)
    statement = next((x.lstrip(">").strip() for x in lines[1:] if x.startswith(">")), "")
    name = test or (issue.rule or "the acceptance check")
    problem = f"{name} failed" + (f": {gist}" if gist else "")
    if statement and statement not in problem:
        problem += f" (`{_cut(statement, 80)}`)"
    return Failure(issue, lens, test, problem, gist)


def words(test: str) -> str:
    """A test's name in words: test_sums_up_to_n[3] → sums up to n."""
    name = re.sub(r"\[.*\]$", "", test)
    name = re.sub(r"^test_?", "", name)
    return name.replace("_", " ").strip() or test


# ---------------------------------------------------------------- lessons


@dataclass
class Lesson:
    """One mistake and its fix, for the memory."""

    title: str
    problem: str
    fix: str
    caught_by: str
    tags: list[str] = field(default_factory=list)


def _caught_by(failures: list[Failure]) -> str:
    tests = list(dict.fromkeys(f.test for f in failures if f.test))
    others = list(dict.fromkeys(f.caught_by for f in failures if not f.test))
    named = [f"the test {tests[0]}"] if len(tests) == 1 else [f"the tests {', '.join(tests)}"] if tests else []
    return ", ".join([*named, *others])


def _mentions(failure_: Failure, change: Change) -> bool:
    """The failing test calls the changed function (its failing line or pytest's `where` line does)."""
    return bool(re.search(rf"\b{re.escape(change.function)}\s*\(", failure_.issue.description))


def lessons(
    resolved: list[tuple[str, ReviewIssue]], before: list[Artifact], after: list[Artifact], summary: str = ""
) -> list[Lesson]:
    """Lessons from blocking issues resolved between two rounds: one per distinct mistake. `resolved` holds
    (lens, issue) pairs; `before` and `after` are the submitted files of the failing and the passing round;
    `summary` (the author's) is the fix only when no file changed."""
    files = changed_files(before, after)
    found = changes(files)
    diff = unified_diff(files)
    failures = [failure(issue, lens) for lens, issue in resolved]
    tested = [f for f in failures if f.issue.category in TEST_CATEGORIES]
    static = [f for f in failures if f.issue.category not in TEST_CATEGORIES]
    out = [_static(f, found, before, diff, summary) for f in static]
    if not tested:
        return out
    groups = _groups(tested, found)
    if not groups:  # no file changed (or none we can read): one lesson per failing test, the author's words as fix
        fix = sentence(summary) or "changed the work until the test passed"
        for f in tested:
            title = f"{words(f.test)} failed: {f.gist}" if f.test else f.problem
            out.append(Lesson(_cut(title, 120), f.problem, fix, f.caught_by, [f.lens, f.issue.category]))
        return out
    for fixes, caught in groups:
        head = fixes[0]
        where = list(dict.fromkeys(c.function for c in fixes))
        if head.kind != "change":
            title = f"{head.title} ({', '.join(where)})"
        else:  # no known shape: the first test in words and what it reported
            f = caught[0]
            title = f"{words(f.test) if f.test else f.issue.rule or 'the check'} failed: {f.gist}"
        gist = "; ".join(dict.fromkeys(c.gist() for c in fixes))
        # a full stop ends the fix's first sentence before the diff (digests quote a fix's first sentence)
        fix = f"{gist} in {', '.join(where)}." + (f"\n```diff\n{diff}\n```" if diff else "")
        problem = "; ".join(dict.fromkeys(f.problem for f in caught))
        tags = [caught[0].lens, *dict.fromkeys(c.kind for c in fixes if c.kind != "change")]
        out.append(Lesson(_cut(title, 120), _cut(problem, 1000), fix, _caught_by(caught), tags))
    return out


def _groups(tested: list[Failure], found: list[Change]) -> list[tuple[list[Change], list[Failure]]]:
    """(changes, failures) per distinct mistake: changes of one kind in one function are one mistake. A failing
    test goes with the changed functions it calls (changes of a known shape first); a test that calls none is
    credited to every change of a known shape (with none, to the first change). Different tests fixed by the
    same mistake are one lesson."""
    mistakes: dict[tuple[str, str], list[Change]] = {}
    for c in found:
        mistakes.setdefault((c.kind, c.function), []).append(c)
    if not mistakes:
        return []
    shaped = [key for key in mistakes if key[0] != "change"]
    caught: dict[tuple[str, str], list[Failure]] = {}
    for f in tested:
        calls = [key for key, changed in mistakes.items() if any(_mentions(f, c) for c in changed)]
        for key in [k for k in calls if k in shaped] or calls or shaped or [next(iter(mistakes))]:
            caught.setdefault(key, []).append(f)
    return [(mistakes[key], failures) for key, failures in caught.items()]


def _static(f: Failure, found: list[Change], before: list[Artifact], diff: str, summary: str) -> Lesson:
    """A finding of an analyser or a model critic: its category and description name the mistake; its
    suggestion and the change at its line (when the diff has one) are the fix."""
    issue = f.issue
    place = re.search(r"([\w.-]+\.\w+):(\d+)", issue.location or "")
    at = [
        c
        for c in found
        if place and PurePosixPath(c.file).name == place.group(1) and abs(c.line - int(place.group(2))) <= 2
    ]
    where = at[0].function if at else None
    if where is None and place:
        lines = next((t.splitlines() for n, t in _texts(before).items() if PurePosixPath(n).name == place.group(1)), [])
        where = _function(lines, int(place.group(2)) - 1)
    title = _cut(f"{issue.category}: {f.gist.rstrip('.')}" if f.gist else issue.category, 100) + (
        f" ({where})" if where else ""
    )
    fix = "; ".join(
        x for x in (sentence(issue.suggestion).rstrip("."), at and f"{at[0].gist()} in {at[0].function}") if x
    )
    fix = (
        (fix or sentence(summary) or "fixed as the critic asked").rstrip(".")
        + "."
        + (f"\n```diff\n{diff}\n```" if at and diff else "")
    )
    return Lesson(title, f.problem, fix, f.caught_by, [f.lens, issue.category, issue.rule or ""])
