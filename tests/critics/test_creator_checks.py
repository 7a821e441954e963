"""How the acceptance check reads a card's `$` lines: the creator's Python code goes to the judge, whether it is a
criterion or an acceptance test's command; anything else is run as written and marked exit status only."""

from __future__ import annotations

import pytest

from hiveboard.board.models import AcceptanceTests, Artifact
from hiveboard.board.models import TestFile as SpecFile  # not a test class
from hiveboard.critics.acceptance import checks
from hiveboard.critics.base import Work

CODE = "from calc import add; assert add(2, 3) == 5"


def work(criteria: list[str] = (), commands: list[str] = (), files: dict[str, str] | None = None) -> Work:
    tests = AcceptanceTests(files=[SpecFile(name=n, content=c) for n, c in (files or {}).items()], commands=commands)
    return Work(
        id=0,
        task_id=0,
        round=1,
        agent="alice",
        fencing_token=1,
        task_type="code",
        title="add",
        description="",
        acceptance_criteria=list(criteria),
        acceptance_tests=tests if commands or files else None,
        output="done",
        summary="done",
        artifacts=[
            Artifact(name="calc.py", kind="code", content="def add(a, b):\n    return a + b\n"),
            Artifact(name="test_calc.py", kind="test", content="def test_nothing():\n    pass\n"),
        ],
        attempts=0,
    )


JUDGED = {
    f'$ python -c "{CODE}"': ["code", "-c"],
    f'$ python3 -I -c "{CODE}"': ["code", "-c"],
    f'$ python3.11 -IBc "{CODE}"': ["code", "-c"],
    f'$ /usr/bin/python3 -W ignore -X dev -c "{CODE}" 1 2': ["code", "-c", "1", "2"],
    f'$ /usr/bin/env python3 -c "{CODE}"': ["code", "-c"],
    "$ python - x <<'EOF'\nfrom calc import add\nassert add(2, 3) == 5\nEOF": ["code", "-", "x"],
    "$ python3 <<-END\n\tfrom calc import add\n\tassert add(2, 3) == 5\n\tEND": ["code", "-"],
}


@pytest.mark.parametrize("line", list(JUDGED))
def test_the_creators_python_code_is_judged_as_a_criterion_and_as_a_command(line):
    for check in (checks(work(criteria=[line]))[0], checks(work(commands=[line]))[0]):
        assert check.judged and not check.exit_status_only and check.script == JUDGED[line], check
        assert check.code.replace("; ", "\n").strip() == CODE.replace("; ", "\n"), check.code
        assert check.argv == []  # the code is on no command line


def test_a_script_or_module_of_the_work_runs_from_the_work():
    for line in ("$ python tool.py", "$ python -m calc"):
        check = checks(work(commands=[line], files={"check.py": CODE}))[0]
        assert check.exit_status_only and not check.spec and check.argv[1:] == line.split()[2:], check


def test_a_script_or_module_of_the_creators_files_is_judged():
    files = {"check.py": CODE, "helpers/__init__.py": "", "helpers/run.py": CODE}
    for line, script in (
        ("$ python check.py 7", ["script", "check.py", "7"]),
        ("$ python -m helpers.run", ["module", "helpers.run"]),
    ):
        check = checks(work(commands=[line], files=files))[0]
        assert check.judged and check.script == script, check


EXIT_STATUS_ONLY = [
    "$ sh -c 'python -c \"from calc import add\"'",
    "$ make test",
    "$ python tool.py",  # the work's script
    "$ python -m calc",  # the work's module
    "$ python -m pytest -q",  # the work's own tests, as a criterion
    "$ python",  # code from an empty stdin
    "$ python -c \"import subprocess, sys; subprocess.run([sys.executable, 'tool.py'], check=True)\"",
    "$ python -c \"import os; assert os.system('python tool.py') == 0\"",
    "$ python -c \"__import__('subprocess').run(['python', 'tool.py'], check=True)\"",
]


@pytest.mark.parametrize("line", EXIT_STATUS_ONLY)
def test_a_command_the_judge_cannot_run_is_exit_status_only(line):
    [check] = checks(work(criteria=[line]))
    assert check.exit_status_only and not check.judged and check.code == "", check


@pytest.mark.parametrize(
    "line",
    [
        "$ sh <<EOF\ntest -f calc.py\nEOF",
        f'$ python -c "{CODE}; print(add(2, 3))" | grep -x 5',  # the judge would drop the grep
        f'$ python -c "{CODE}" && test -f calc.py',
        "$ cat <<EOF | python\nfrom calc import add\nEOF",
    ],
)
def test_a_command_with_shell_syntax_runs_in_the_shell(line):
    [check] = checks(work(criteria=[line]))
    assert check.argv == ["sh", "-c", line[2:]] and check.exit_status_only, check


def test_the_authors_own_tests_are_not_the_creators():
    [own] = checks(work())  # no criteria: pytest over the submitted tests
    assert own.pytest == [] and not own.creator and not own.exit_status_only
