"""The gate against the agent it judges: wrong code never passes the creator's tests, whatever it does from
inside its own process, and hidden tests never leave the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import call, needs_sandbox
from reviewing import NO_BUILTINS, critic, verdict

from hiveboard.critics.config import CriticConfig, ReviewConfig

pytestmark = [pytest.mark.anyio, needs_sandbox]

SPEC = (
    "from calc import add\n\n\ndef test_small():\n    assert add(2, 3) == 5\n\n\ndef test_negative():\n"
    "    assert add(-1, 1) == 0\n\n\ndef test_big():\n    assert add(982451000, 653) == 982451653\n"
)
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"

# Wrong code (a - b) dressed up to fool a runner that trusts the process it imported the code into.
ATTACKS = {
    "patches pytest's runtest": "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n" + WRONG,
    "rewrites reports found through gc": (
        "import gc\n\n\ndef add(a, b):\n    for o in gc.get_objects():\n        if type(o).__name__ == 'TestReport':\n"
        "            o.outcome = 'passed'\n        if hasattr(o, 'tests') and isinstance(getattr(o, 'tests'), dict):\n"
        "            for t in o.tests.values():\n                t['outcome'] = 'passed'\n    return a - b\n"
    ),
    "forges a report on every descriptor and exits": (
        "import json, os\nfake = json.dumps({'exitstatus': 0, 'collected': 3, 'counts': {'passed': 3}, 'tests': {}})"
        "\nfor fd in range(3, 256):\n    try:\n        os.write(fd, fake.encode())\n    except OSError:\n        pass\n"
        "os._exit(0)\n"
    ),
    "returns an always-equal object": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n\n    def __ne__(self, other):\n"
        "        return False\n\n    __hash__ = object.__hash__\n\n\ndef add(a, b):\n    return Anything()\n"
    ),
    "returns an int that equals anything": (
        "class Liar(int):\n    def __eq__(self, other):\n        return True\n\n    __hash__ = int.__hash__\n\n\n"
        "def add(a, b):\n    return Liar(a - b)\n"
    ),
    "reads the expected value from the caller's line": (
        "import inspect, re\n\n\ndef add(a, b):\n    for frame in inspect.stack():\n"
        "        found = re.search(r'==\\s*(-?\\d+)', ''.join(frame.code_context or []))\n        if found:\n"
        "            return int(found.group(1))\n    return a - b\n"
    ),
    "skips the inputs it gets wrong": (
        "import unittest\n\n\ndef add(a, b):\n    if a - b != a + b:\n        raise unittest.SkipTest('flaky')\n"
        "    return a - b\n"
    ),
    "calls pytest.skip": "import pytest\n\n\ndef add(a, b):\n    pytest.skip('not today')\n",
    "marks itself an expected failure": "import pytest\n\n\ndef add(a, b):\n    pytest.xfail('known')\n",
    "exits the process at import": "import os\nos._exit(0)\n" + WRONG,
    "raises SystemExit(0)": "def add(a, b):\n    raise SystemExit(0)\n",
    "kills every process it can see": (
        "import os, signal\nfor pid in range(1, 4096):\n    if pid != os.getpid():\n        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n" + WRONG
    ),
    "writes through every process's descriptors in /proc": (
        "import glob, json\nfake = json.dumps({'exitstatus': 0, 'collected': 3, 'counts': {'passed': 3}, "
        "'tests': {}})\nfor path in glob.glob('/proc/*/fd/*'):\n    try:\n        with open(path, 'w') as out:\n"
        "            out.write(fake)\n    except OSError:\n        pass\n" + WRONG
    ),
    "replaces pytest and the import system": (
        "import builtins, sys, types\nfake = types.ModuleType('pytest')\nfake.main = lambda *a, **k: 0\n"
        "sys.modules['pytest'] = sys.modules['_pytest'] = fake\nbuiltins.__import__ = lambda *a, **k: fake\n" + WRONG
    ),
    "answers for the judge on its own pipe": (
        "import os\n\n\ndef add(a, b):\n    for fd in range(3, 32):\n        try:\n"
        "            os.write(fd, b'{\"a\": 982451653}\\n')\n        except OSError:\n            pass\n    return a - b\n"
    ),
}

ACCEPTANCE_ONLY = ReviewConfig(
    critics={**NO_BUILTINS, "acceptance": CriticConfig(lens="tests", backend="acceptance")},
    execute_timeout=30,
    max_rounds=5,
)


async def hand_in(client, task_id: int, files: dict[str, str]) -> None:
    claim = await call(client, "claim_task", task_id=task_id)
    await call(
        client,
        "complete_task",
        task_id=task_id,
        token=claim["token"],
        output="add two numbers",
        artifacts=[
            {"name": name, "kind": "test" if name.startswith("test_") else "code", "content": text}
            for name, text in files.items()
        ],
    )


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_wrong_code_never_passes_the_creators_tests(connect, reviewer, attack):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="add numbers",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SPEC}], "hidden": True},
        )
        await hand_in(alice, card["id"], {"calc.py": ATTACKS[attack]})
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL", (attack, critic(round1, "acceptance"))
        assert (await call(carol, "get_task", task_id=card["id"]))["status"] == "in_progress"

        await hand_in(alice, card["id"], {"calc.py": RIGHT})  # the right code still passes
        round2 = (await verdict(alice, card["id"]))["rounds"][-1]
        assert round2["verdict"] == "PASS" and round2["outcome"] == "done", critic(round2, "acceptance")


# Attacks on how the tests use what the code returns: each pairs the creator's test with wrong code
SHAPED = {
    "a context manager that swallows the failing assert": (
        "store",
        "from store import connect\n\n\ndef test_get():\n    with connect() as db:\n"
        "        assert db.get('k') == 'v'\n",
        "class DB:\n    def __enter__(self):\n        return self\n\n    def __exit__(self, *exc):\n"
        "        return True\n\n    def get(self, key):\n        return None\n\n\ndef connect():\n    return DB()\n",
    ),
    "StopIteration that ends the tests' own loop": (
        "calc",
        "from calc import is_prime\n\n\ndef test_primes():\n    assert all(map(is_prime, [2, 3, 5, 7]))\n",
        "def is_prime(n):\n    raise StopIteration\n",
    ),
    "a list whose __contains__ says yes": (
        "calc",
        "from calc import primes_upto\n\n\ndef test_in():\n    assert 29 in primes_upto(30)\n\n\n"
        "def test_count():\n    assert primes_upto(30).count(29) == 1\n",
        "class Yes(list):\n    def __contains__(self, x):\n        return True\n\n    def count(self, x):\n"
        "        return 1\n\n\ndef primes_upto(n):\n    return Yes()\n",
    ),
    "a __repr__ that stops the test run": (
        "stack",
        "from stack import Stack\n\n\ndef test_empty():\n    assert Stack().is_empty()\n\n\n"
        "def test_push_pop():\n    s = Stack()\n    s.push(1)\n    assert s.pop() == 1\n",
        "class Stack:\n    def is_empty(self):\n        return True\n\n    def push(self, x):\n        pass\n\n"
        "    def pop(self):\n        return None\n\n    def __repr__(self):\n        raise SystemExit(0)\n",
    ),
}


@pytest.mark.parametrize("attack", list(SHAPED))
async def test_wrong_code_shaped_to_the_tests_never_passes(connect, reviewer, attack):
    module, spec, code = SHAPED[attack]
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="shaped",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": spec}], "hidden": True},
        )
        await hand_in(alice, card["id"], {f"{module}.py": code})
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL", (attack, critic(round1, "acceptance"))


# Found by red-team passes: each case in gate_cases/<case>/ holds the creator's files (spec/) and the work
# (work/); its README says what the work does. A correct_* case is correct code in a shape tests use (it
# must pass); every other case is wrong code (it must fail, and learn nothing hidden).
CASES = Path(__file__).with_name("gate_cases")
NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def files(folder: Path) -> dict[str, str]:
    return {f.relative_to(folder).as_posix(): f.read_text() for f in sorted(folder.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("name", NAMES)
async def test_gate_cases(connect, reviewer, name):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title=name,
            acceptance_tests={
                "hidden": True,
                "files": [{"name": path, "content": text} for path, text in files(CASES / name / "spec").items()],
            },
        )
        await hand_in(alice, card["id"], files(CASES / name / "work"))
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == ("PASS" if name.startswith("correct_") else "FAIL"), critic(round1, "acceptance")
        assert "982451653" not in json.dumps(round1)


async def test_a_creator_script_cannot_be_ended_early(connect, reviewer):
    """`$ python check.py` runs in the judge: the code's os._exit or SystemExit(0) cannot end it well."""
    engine = reviewer(ACCEPTANCE_ONLY)
    check = "from calc import add\nassert add(2, 3) == 5\nassert add(40, 2) == 42\nprint('checked')\n"
    tests = {"files": [{"name": "check.py", "content": check}], "commands": ["$ python check.py"]}
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        # a card for each attack: the same failed check twice on one card would send it to a person (no progress)
        for attack in (
            "import os\nos._exit(0)\n",
            "def add(a, b):\n    raise SystemExit(0)\n",
            ATTACKS["returns an always-equal object"],
        ):
            card = await call(carol, "create_task", title="add", acceptance_tests=tests)
            await hand_in(alice, card["id"], {"calc.py": attack})
            last = (await verdict(alice, card["id"]))["rounds"][-1]
            assert last["verdict"] == "FAIL", (attack, critic(last, "acceptance"))
        await hand_in(alice, card["id"], {"calc.py": RIGHT})
        last = (await verdict(alice, card["id"]))["rounds"][-1]
        assert last["verdict"] == "PASS", critic(last, "acceptance")
        assert "evidence: exit status only" not in critic(last, "acceptance")["summary"]
        assert (await call(carol, "get_task", task_id=card["id"])).get("evidence") is None


async def test_a_command_only_its_exit_status_can_judge_says_so(connect, reviewer):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await call(
            carol,
            "create_task",
            title="add",
            acceptance_tests={
                "files": [{"name": "check.sh", "content": "python -c 'from calc import add; assert add(2, 3) == 5'\n"}],
                "commands": ["$ sh check.sh"],
            },
        )
        await hand_in(alice, card["id"], {"calc.py": RIGHT})
        last = (await verdict(alice, card["id"]))["rounds"][-1]
        assert last["verdict"] == "PASS" and "evidence: exit status only" in critic(last, "acceptance")["summary"]
        assert "exit status only" in (await call(carol, "get_task", task_id=card["id"]))["evidence"]


# Ways to read the creator's hidden tests: from the code, from the author's own tests, through values
SECRET_SPEC = "# zebra-marker-7731\n" + SPEC
LEAKS = {
    "calc.py": (
        "import glob, os\n\n\ndef _spec():\n    return ''.join(open(f).read() for f in glob.glob('/review*/spec/*')"
        " + glob.glob('/tmp/**/spec/*', recursive=True) if os.path.isfile(f))\n\n\n"
        "def add(a, b):\n    raise AssertionError('LEAK ' + _spec() + ' ' + repr(os.listdir('/')))\n"
    ),
    "test_mine.py": (
        "import glob, os\nfrom calc import add\n\n\ndef test_reads_the_spec():\n"
        "    found = [open(f).read() for f in glob.glob('/review*/spec/*') if os.path.isfile(f)]\n"
        "    assert not found, ''.join(found)\n"
    ),
}


async def test_hidden_tests_never_leave_the_sandbox(connect, reviewer, board):
    engine = reviewer()  # the default critics
    async with connect("carol") as carol, connect("alice", review=engine) as alice, connect("bob") as bob:
        card = await call(
            carol,
            "create_task",
            title="add numbers",
            acceptance_tests={"files": [{"name": "test_spec.py", "content": SECRET_SPEC}], "hidden": True},
        )
        await hand_in(alice, card["id"], LEAKS)
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL"
        await hand_in(alice, card["id"], {"calc.py": WRONG})  # a hidden failure shows no values
        round2 = (await verdict(alice, card["id"]))["rounds"][-1]
        # its author reads that the hidden tests did not pass, not which (board/review_models.sealed)
        assert [i["category"] for i in critic(round2, "acceptance")["issues"]] == ["hidden-tests"]
        # the card's creator reads which, by test id and a kind from a fixed list
        round2 = (await call(carol, "get_review", task_id=card["id"], full=True))["rounds"][-1]
        failures = [i for i in critic(round2, "acceptance")["issues"] if "acceptance tests" in (i["rule"] or "")]
        assert {(i["location"], i["description"]) for i in failures} == {
            ("test_spec.py::test_small", "failed: AssertionError"),
            ("test_spec.py::test_negative", "failed: AssertionError"),
            ("test_spec.py::test_big", "failed: AssertionError"),
        }
        await hand_in(alice, card["id"], {"calc.py": RIGHT})
        assert (await verdict(alice, card["id"]))["rounds"][-1]["outcome"] == "done"

        seen = []
        for agent in (alice, bob):
            seen.append(await call(agent, "get_review", task_id=card["id"], full=True))
            seen.append(await call(agent, "get_task", task_id=card["id"]))
            for box in ("inbox", "pool"):
                seen.append(await call(agent, "get_messages", box=box, full=True, unread_only=False, limit=100))
        for answer in seen:
            text = json.dumps(answer)
            assert "zebra-marker" not in text and "982451653" not in text and "982451000" not in text
    # nothing anywhere in the store carries it, but the card's own tests
    db = board.store.db
    for table in db.table_names():
        if table == "tasks" or table.startswith(("sqlite_", "_")) or "fts" in table:
            continue
        for row in db[table].rows:
            text = json.dumps(row, default=str)
            assert "zebra-marker" not in text and "982451653" not in text, (table, text[:300])
