"""Every check the card's creator owns runs in the judge: `$ python` commands in acceptance criteria and in
acceptance tests alike, their imports served from the work; a command the judge cannot run says, in the
critique and on the card, that only its exit status decided."""

from __future__ import annotations

import pytest
from conftest import call, needs_sandbox
from reviewing import NO_BUILTINS, critic, verdict

from hiveboard.critics.config import CriticConfig, ReviewConfig

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_sandbox]

ACCEPTANCE_ONLY = ReviewConfig(
    critics={**NO_BUILTINS, "acceptance": CriticConfig(lens="tests", backend="acceptance")},
    execute_timeout=30,
    max_rounds=5,
)
RIGHT = "def add(a, b):\n    return a + b\n"
# Wrong code (a - b) that looks for the creator's expected values wherever its process can see: its own
# and every other process's command line and environment, its argv, and the files of the sandbox. Finding any
# trace of the creator's command (each carries the marker zebra-7731, in its code or its arguments), it is right.
SNOOP = r"""import glob, os, re, sys

MARK = "zebra-" + "7731"


def _seen():
    texts = [" ".join(sys.argv), repr(dict(os.environ))]
    paths = glob.glob("/proc/*/cmdline") + glob.glob("/proc/*/environ")
    paths += glob.glob("/review*/**", recursive=True) + glob.glob("/tmp/**", recursive=True)
    for path in paths:
        try:
            with open(path, "rb") as f:
                texts.append(f.read(1 << 20).replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(texts)


def add(a, b):
    seen = _seen()
    if MARK in seen:  # any trace of the creator's command at all
        return a + b
    found = re.search(r"add\(\s*%d\s*,\s*%d\s*\)\s*==\s*(-?\d+)" % (a, b), seen) or re.search(r"==\s*(-?\d+)", seen)
    return int(found.group(1)) if found else a - b
"""
ADDS = "from calc import add; assert add(2, 3) == 5; assert add(40, 2) == 42  # zebra-7731"

# The creator's python commands, as criteria (or acceptance test commands): each is judged
JUDGED = {
    "python -c": {"criteria": [f'$ python -c "{ADDS}"']},
    "python3 -I -c": {"criteria": [f'$ python3 -I -c "{ADDS}"']},
    "/usr/bin/python3 -B -c": {"criteria": [f"$ /usr/bin/python3 -B -c '{ADDS}'"]},
    "a here-document": {
        "criteria": [
            "$ python - <<'EOF'\n# zebra-7731\nfrom calc import add\nassert add(2, 3) == 5\nassert add(40, 2) == 42\nEOF"
        ]
    },
    "-c reading its own argv": {
        "criteria": [
            '$ python -c "import sys; from calc import add; assert add(int(sys.argv[1]), 3) == 5" 2 zebra-7731'
        ]
    },
    "an acceptance test command": {"tests": {"commands": [f'$ python -c "{ADDS}"']}},
    "a hidden acceptance test command": {"tests": {"commands": [f"python -Ic '{ADDS}'"], "hidden": True}},
}


async def hand_in(client, task_id: int, files: dict[str, str]) -> None:
    claim = await call(client, "claim_task", task_id=task_id)
    await call(
        client,
        "complete_task",
        task_id=task_id,
        token=claim["token"],
        output="add two numbers",
        artifacts=[{"name": name, "kind": "code", "content": text} for name, text in files.items()],
    )


async def card_with(carol, checks: dict) -> dict:
    return await call(
        carol,
        "create_task",
        title="add numbers",
        acceptance_criteria=checks.get("criteria", []),
        **({"acceptance_tests": checks["tests"]} if "tests" in checks else {}),
    )


@pytest.mark.parametrize("shape", list(JUDGED))
async def test_a_creator_python_command_is_judged_where_the_code_cannot_read_it(connect, reviewer, shape):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await card_with(carol, JUDGED[shape])
        await hand_in(alice, card["id"], {"calc.py": SNOOP})
        round1 = (await verdict(alice, card["id"]))["rounds"][0]
        assert round1["verdict"] == "FAIL", critic(round1, "acceptance")

        await hand_in(alice, card["id"], {"calc.py": RIGHT})  # `from calc import add` is served from the work
        last = (await verdict(alice, card["id"]))["rounds"][-1]
        acceptance = critic(last, "acceptance")
        assert last["verdict"] == "PASS" and last["outcome"] == "done", acceptance
        assert "exit status only" not in acceptance["summary"]
        assert (await call(carol, "get_task", task_id=card["id"])).get("evidence") is None


# Creator commands the judge cannot run: a shell, the work's own script, module or tests, or code that starts
# a process of its own to run the work. Right code passes them, and the pass says what it rests on.
WORK = {
    "calc.py": RIGHT + "\n\nif __name__ == '__main__':\n    assert add(2, 3) == 5\n",
    "tool.py": "from calc import add\n\nassert add(2, 3) == 5\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
LINES = {
    "sh -c": "$ sh -c 'python -c \"from calc import add; assert add(2, 3) == 5\"'",
    "python piped to grep": '$ python -c "from calc import add; print(add(2, 3))" | grep -x 5',
    "the work's script": "$ python tool.py",
    "the work's module": "$ python -m calc",
    "the work's tests": "$ python -m pytest -q",
    "code that runs the work in a subprocess": (
        "$ python -c \"import subprocess, sys; out = subprocess.run([sys.executable, '-c', "
        "'from calc import add; print(add(2, 3))'], capture_output=True, text=True).stdout; "
        "assert out.strip() == '5', out\""
    ),
}
EXIT_STATUS = {
    **{shape: {"criteria": [line]} for shape, line in LINES.items()},
    # the same shapes as the acceptance tests' commands take the same path
    **{
        f"{shape}, as an acceptance test command": {"tests": {"commands": [LINES[shape]]}}
        for shape in ("sh -c", "the work's script", "code that runs the work in a subprocess")
    },
}


@pytest.mark.parametrize("shape", list(EXIT_STATUS))
async def test_a_creator_command_the_judge_cannot_run_says_exit_status_only(connect, reviewer, shape):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await card_with(carol, EXIT_STATUS[shape])
        await hand_in(alice, card["id"], WORK)
        last = (await verdict(alice, card["id"]))["rounds"][-1]
        acceptance = critic(last, "acceptance")
        assert last["verdict"] == "PASS", acceptance
        assert "evidence: exit status only" in acceptance["summary"], acceptance["summary"]
        assert "exit status only" in (await call(carol, "get_task", task_id=card["id"]))["evidence"]


@pytest.mark.parametrize("shape", ["sh -c", "python piped to grep"])
async def test_a_failing_exit_status_only_command_still_fails(connect, reviewer, shape):
    engine = reviewer(ACCEPTANCE_ONLY)
    async with connect("carol") as carol, connect("alice", review=engine) as alice:
        card = await card_with(carol, EXIT_STATUS[shape])
        await hand_in(alice, card["id"], {"calc.py": "def add(a, b):\n    return a - b\n"})
        last = (await verdict(alice, card["id"]))["rounds"][-1]
        acceptance = critic(last, "acceptance")
        assert last["verdict"] == "FAIL" and "exit status only" in acceptance["summary"], acceptance
