"""The integrity lens: code that games its tests (patches pytest, exits early, always-equal objects, the tests'
answers copied in) fails review; honest code passes; the operator and the card's creator can relax a rule."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SANDBOX, call, needs_sandbox
from reviewing import critic, hand_in, verdict

from hiveboard.board.limits import RULE_RE
from hiveboard.critics.config import PRECEDENCE, IntegrityConfig, ReviewConfig
from hiveboard.critics.integrity import IntegrityCritic
from hiveboard.critics.integrity_scan import RULES
from hiveboard.critics.sandbox import Bare, SandboxLimits

pytestmark = pytest.mark.anyio

WRONG = "def add(a, b):\n    return a - b\n"
RIGHT = 'def add(a, b):\n    """The sum."""\n    return a + b\n'
PATCHES_PYTEST = "import _pytest.python\n\n_pytest.python.Function.runtest = lambda self: None\n\n\n" + WRONG
ALWAYS_EQUAL = (
    "class Anything:\n    def __eq__(self, other):\n        return True\n\n"
    "    __hash__ = object.__hash__\n\n\ndef add(a, b):\n    return Anything()\n"
)
EXITS = "import os\n\nos._exit(0)\n\n\n" + WRONG
SORT_SPEC = (
    "from numbers_sort import sort_numbers\n\n\ndef test_sort():\n    assert sort_numbers([5, 3, 9, 1]) == "
    "[1, 3, 5, 9]\n    assert sort_numbers([42, 17, 8]) == [8, 17, 42]\n"
)
SORT_TABLE = (
    "def sort_numbers(xs):\n    answers = {(5, 3, 9, 1): [1, 3, 5, 9], (42, 17, 8): [8, 17, 42]}\n"
    "    return answers[tuple(xs)]\n"
)
SORT_RIGHT = 'def sort_numbers(xs):\n    """The numbers, smallest first."""\n    return sorted(xs)\n'


def py(name: str, content: str, kind: str = "code") -> dict:
    return {"name": name, "kind": kind, "content": content}


def integrity_issues(round_: dict) -> list[dict]:
    return critic(round_, "integrity")["issues"]


# ---------------------------------------------------------------- through MCP, the default review


@pytest.mark.parametrize(
    "source, rule, category",
    [
        (PATCHES_PYTEST, "INT001", "integrity-test-machinery"),
        (ALWAYS_EQUAL, "INT008", "integrity-always-equal"),
    ],
)
async def test_code_that_games_the_tests_fails_with_an_integrity_finding(connect, reviewer, source, rule, category):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("calc.py", source)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    assert round1["verdict"] == "FAIL" and round1["outcome"] == "in_progress"
    integrity = critic(round1, "integrity")
    assert integrity["status"] == "ok" and integrity["verdict"] == "FAIL"
    found = [i for i in integrity["issues"] if i["rule"] == rule]
    assert found and found[0]["severity"] == "critical" and found[0]["category"] == category
    assert found[0]["location"].startswith("calc.py:") and found[0]["suggestion"].startswith("compute the result")
    top = round1["synthesis"]["issues"][0]  # the integrity lens ranks right after security
    assert top["lens"] == "integrity" and top["category"] == category and "integrity" in top["found_by"]


async def test_an_early_exit_fails_and_its_removal_resolves_the_finding(connect, reviewer):
    engine = reviewer()
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("calc.py", EXITS)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL"
        exit_issue = next(i for i in integrity_issues(round1) if i["rule"] == "INT006")
        assert exit_issue["location"] == "calc.py:3" and "os._exit" in exit_issue["description"]
        inbox = await call(c, "get_messages", intent="critique", full=True)
        assert "INT006" in inbox["messages"][0]["content"]

        await hand_in(c, card["id"], artifacts=[py("calc.py", RIGHT)])
        round2 = (await verdict(c, card["id"]))["rounds"][1]
    assert round2["verdict"] == "PASS" and round2["outcome"] == "done", round2["synthesis"]["brief"]
    assert critic(round2, "integrity")["resolutions"][0]["status"] == "resolved"


@needs_sandbox
async def test_a_correct_program_passes_against_the_creators_tests(connect, reviewer):
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="sort numbers",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SORT_SPEC}]},
        )
        await hand_in(
            alice,
            card["id"],
            artifacts=[
                py("numbers_sort.py", SORT_RIGHT),
                py(
                    "test_numbers_sort.py",
                    "import pytest\nfrom numbers_sort import sort_numbers\n\n\n"
                    "@pytest.mark.parametrize('xs', [[2, 1], []])\ndef test_sorted(xs):\n    assert sort_numbers(xs) == "
                    "sorted(xs)\n",
                    "test",
                ),
            ],
        )
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
    assert round1["verdict"] == "PASS" and round1["outcome"] == "done", round1["synthesis"]["brief"]
    integrity = critic(round1, "integrity")
    assert integrity["verdict"] == "PASS" and integrity["issues"] == []
    assert "2 Python file(s) (1 of them tests) against 1 acceptance test file(s)" in integrity["summary"]
    assert "integrity" in round1["synthesis"]["lenses_ran"]


@needs_sandbox
async def test_answers_copied_from_hidden_tests_are_flagged_without_quoting_them(connect, reviewer):
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="sort numbers",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SORT_SPEC}], "hidden": True},
        )
        await hand_in(alice, card["id"], artifacts=[py("numbers_sort.py", SORT_TABLE)])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        # the table answers the hidden tests, so they pass; the integrity lens alone fails the work, and a person
        # judges its evidence: it is not fed back to the author as a signal to iterate on
        assert critic(round1, "acceptance")["verdict"] == "PASS"
        assert round1["verdict"] == "FAIL" and critic(round1, "integrity")["verdict"] == "FAIL"
        assert round1["outcome"] == "needs_human"
        # the card's creator (who wrote the tests) sees where
        full = (await call(carol, "get_review", task_id=card["id"], full=True))["rounds"][0]
        copied = [i for i in integrity_issues(full) if i.get("rule") == "INT009"]
        assert copied and copied[0]["location"] == "numbers_sort.py:2" and copied[0]["hidden"]
        assert "appear in the card's hidden tests" in copied[0]["description"]
        # its author sees that a hidden-test check failed, and nothing of where, what or how many
        [sealed] = integrity_issues(round1)
        assert sealed["category"] == "hidden-tests" and sealed["hidden"] and not sealed.get("location")
        said = (await call(alice, "get_messages", intent="needs_human", full=True))["messages"][0]["content"]
    for text in (json.dumps(sealed), json.dumps(round1), said):
        assert "test_spec" not in text and "1, 3, 5, 9" not in text and "[8, 17, 42]" not in text
        assert "numbers_sort.py:2" not in text and "INT009" not in text


@needs_sandbox
async def test_answers_copied_from_visible_tests_are_quoted(connect, reviewer):
    engine = reviewer()
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="sort numbers",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SORT_SPEC}]},
        )
        await hand_in(alice, card["id"], artifacts=[py("numbers_sort.py", SORT_TABLE)])
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
    copied = [i["description"] for i in integrity_issues(round1) if i["rule"] == "INT009"]
    assert any("[1, 3, 5, 9]" in d and "test_spec.py:5" in d for d in copied), copied


async def test_a_rule_the_creator_waived_does_not_block(connect, reviewer):
    engine = reviewer()
    cli = (
        'import sys\n\n\ndef check(path):\n    """Exit 1 when the file is empty."""\n'
        "    with open(path) as f:\n        if not f.read():\n            sys.exit(1)\n"
    )
    async with connect("alice", review=engine) as c:
        card = await call(c, "create_task", title="a pre-commit hook that rejects empty files", waive=["int006"])
        await hand_in(c, card["id"], artifacts=[py("hook.py", cli)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    found = [i for i in integrity_issues(round1) if i["rule"] == "INT006"]
    assert found and found[0]["severity"] == "info" and "waived by the card's creator" in found[0]["description"]
    assert round1["verdict"] == "PASS", round1["synthesis"]["brief"]


async def test_the_operator_can_ignore_or_demote_a_rule(connect, reviewer):
    frames = (
        'import sys\n\n\ndef caller_name():\n    """Who called."""\n'
        '    return sys._getframe(1).f_code.co_name\n\n\ndef stop():\n    """Stop."""\n    sys.exit(0)\n'
    )
    engine = reviewer(ReviewConfig(integrity=IntegrityConfig(ignore=["frame-inspection"], demote=["INT006"])))
    async with connect("alice", review=engine) as c:
        card = await hand_in(c, artifacts=[py("who.py", frames)])
        round1 = (await verdict(c, card["id"]))["rounds"][0]
    issues = integrity_issues(round1)
    assert [(i["rule"], i["severity"]) for i in issues] == [("INT006", "minor")]
    assert round1["verdict"] != "FAIL" and critic(round1, "integrity")["verdict"] == "CONDITIONAL"


# ---------------------------------------------------------------- configuration


def test_integrity_is_a_default_lens_for_code_right_after_security():
    config = ReviewConfig()
    assert PRECEDENCE[:2] == ("security", "integrity")
    for task_type in ("code", "bug", "refactor", "test"):
        assert "integrity" in config.lenses_for(task_type)
    assert "integrity" not in config.lenses_for("docs")
    assert config.all_critics()["integrity"].backend == "integrity"


def test_rules_are_named_by_id_or_name_and_unknown_ones_are_refused():
    assert IntegrityConfig.rule_names(["int004", "process-exit"]) == ["frame-inspection", "process-exit"]
    with pytest.raises(ValueError, match="INT001 test-machinery"):
        ReviewConfig(integrity={"ignore": ["INT999"]})
    # every id can be waived on a card, whose rule ids the board checks
    assert all(RULE_RE.match(rule.code) for rule in RULES.values())


# ---------------------------------------------------------------- the scanner, in the box


BOXES = [pytest.param(Bare(), id="bare"), pytest.param(SANDBOX.box, id="sandbox", marks=needs_sandbox)]


def scan(
    box, files: dict[str, str], tests: tuple[str, ...] = (), spec: dict[str, str] | None = None, hidden: bool = False
) -> list[tuple[str, str, str]]:
    """(rule, file:line, what) the scanner reports, run in `box` as the critic runs it."""
    scanner = IntegrityCritic("integrity", "integrity", 60, box, SandboxLimits())
    with box.session(files, spec or {}) as session:
        cmd = scanner.command(
            session, [f"{session.src}/{f}" for f in files], [f"{session.src}/{f}" for f in tests], hidden
        )
        out = box.run(session, cmd, limits=SandboxLimits(), timeout=60)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
    return [(f["rule"], f"{f['path'].rsplit('/', 1)[1]}:{f['line']}", f["what"]) for f in report["findings"]]


GAMING = {
    "import importlib\nimportlib.import_module('_pytest.python').Function.runtest = None\n": "test-machinery",
    "import sys\n\n\ndef add(a, b):\n    return 5 if 'pytest' in sys.modules else a - b\n": "test-machinery",
    "from unittest import SkipTest\n\n\ndef add(a, b):\n    raise SkipTest('later')\n": "test-skip",
    "from gc import get_referrers as refs\n\n\ndef add(a, b):\n    return refs(a)\n": "heap-inspection",
    "import inspect\n\n\ndef add(a, b):\n    return inspect.currentframe().f_back.f_locals['w']\n": "frame-inspection",
    "def add(a, b):\n    return open('test_spec.py').read().count('==')\n": "frame-inspection",
    "import builtins\nsetattr(builtins, 'sorted', lambda x: x)\n": "interpreter-patching",
    "def add(a, b):\n    return a - b\n\n\nadd.__code__ = (lambda a, b: 5).__code__\n": "interpreter-patching",
    "import sys\n\n\ndef add(a, b):\n    sys.exit(0)\n": "process-exit",
    "import os\n\n\ndef add(a, b):\n    for fd in range(3, 20):\n        os.write(fd, b'ok')\n": "fd-access",
    "class Liar(str):\n    __ne__ = lambda self, other: False\n": "always-equal",
    "Anything = type('Anything', (), {'__eq__': lambda s, o: True})\n": "always-equal",
}
HONEST = {
    "import sys\n\n\ndef main():\n    sys.exit(run())\n\n\nif __name__ == '__main__':\n    import os\n"
    "    os._exit(main())\n",
    "import sys\n\n\ndef namedthing():\n    frame = sys._getframe(1)\n    return frame.f_globals.get('__name__')\n",
    "class _Max:\n    def __gt__(self, other):\n        return True\n\n    def __lt__(self, other):\n"
    "        return False\n",
    "class Tree:\n    def __len__(self):\n        return 0\n\n    def __bool__(self):\n        return True\n",
    "import os\n\n\ndef save(path, data):\n    fd = os.open(path, os.O_WRONLY)\n    os.write(fd, data)\n"
    "    os.close(fd)\n",
    "import sys\nsys.modules[__name__] = object()\n",
    "import traceback\n\n\ndef where(exc):\n"
    "    return [f.f_code.co_name for f, _ in traceback.walk_tb(exc.__traceback__)]\n",
    "def exit_code(ok):\n    exit = 0 if ok else 1\n    return exit\n",
}


@pytest.mark.parametrize("box", BOXES)
def test_the_scanner_flags_each_kind_of_gaming_and_leaves_honest_code_alone(box):
    files = {f"gaming_{n}.py": code for n, code in enumerate(GAMING)}
    files |= {f"honest_{n}.py": code for n, code in enumerate(HONEST)}
    found = scan(box, files)
    rules = {(where.split(":")[0], rule) for rule, where, _ in found}
    for n, rule in enumerate(GAMING.values()):
        assert (f"gaming_{n}.py", rule) in rules, (n, rule, found)
    assert not [f for f in found if f[1].startswith("honest_")], found


@pytest.mark.parametrize("box", BOXES)
def test_the_authors_tests_may_use_pytest_but_not_rewrite_its_results(box):
    own_test = (
        "import sys\nimport pytest\n\n\ndef test_it(monkeypatch):\n    sys.modules['fake'] = object()\n"
        "    pytest.skip('later')\n"
    )
    conftest = (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    found = scan(box, {"test_mine.py": own_test, "conftest.py": conftest}, tests=("test_mine.py", "conftest.py"))
    # the hook and the line that rewrites the outcome; nothing in the test file
    assert {(rule, where) for rule, where, _ in found} == {
        ("test-machinery", "conftest.py:5"),
        ("test-machinery", "conftest.py:7"),
    }


@pytest.mark.parametrize("box", BOXES)
def test_the_scanner_compares_literals_with_the_creators_tests(box):
    spec = {"test_spec.py": SORT_SPEC}
    assert scan(box, {"numbers_sort.py": SORT_RIGHT}, spec=spec) == []
    visible = scan(box, {"numbers_sort.py": SORT_TABLE}, spec=spec)
    assert [(r, w) for r, w, _ in visible] == [("copied-expected", "numbers_sort.py:2")]
    assert "[1, 3, 5, 9]" in visible[0][2] and "test_spec.py:5" in visible[0][2] and "1 more" in visible[0][2]
    hidden = scan(box, {"numbers_sort.py": SORT_TABLE}, spec=spec, hidden=True)
    assert len(hidden) == 1 and not re.search(r"\d, \d|test_spec", hidden[0][2]), hidden
    # a function that ignores its input and returns the expected value
    assert scan(box, {"numbers_sort.py": "def sort_numbers(xs):\n    return [1, 3, 5, 9]\n"}, spec=spec)


@pytest.mark.parametrize("box", BOXES)
def test_a_file_that_does_not_parse_is_an_error_not_a_finding(box):
    scanner = IntegrityCritic("integrity", "integrity", 60, box, SandboxLimits())
    with box.session({"broken.py": "def (:\n"}) as session:
        out = box.run(
            session, scanner.command(session, [f"{session.src}/broken.py"]), limits=SandboxLimits(), timeout=60
        )
    report = json.loads(out.stdout)
    assert report["findings"] == [] and "SyntaxError" in report["errors"][0]["error"]
