"""Work handed in as a commit (complete_task ref=): reviewed on the commit's tree with the repository's own tests,
then merged by the queue, one merge at a time per repository; through MCP, with real git repositories, real
bubblewrap and a real `python -m pytest -q` as the repository's test command."""

from __future__ import annotations

import subprocess

import anyio
import pytest
from conftest import call, needs_sandbox
from fake_llm import FakeLLM
from git_repos import CALC, TESTS, card_on, git, make_repo, needs_git, register, settled, work_on
from reviewing import NO_BUILTINS, critic, llm_critic, verdict

from hiveboard.critics.config import ReviewConfig
from hiveboard.critics.engine import ReviewEngine
from hiveboard.critics.merge import MergeQueue, MergeWorker
from hiveboard.server.web.app import card_page
from hiveboard.server.web.pages import Viewer

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql"), needs_git, needs_sandbox]

# the repository's tests and the card's checks: the acceptance critic alone
TESTS_ONLY = ReviewConfig(
    critics={k: v for k, v in NO_BUILTINS.items() if k != "acceptance"}, task_types={"code": ["tests"]}
)
FIXED = CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """The sum of a and b."""\n')


def is_ancestor(repo, commit: str, of: str = "main") -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", commit, of], cwd=repo).returncode == 0


async def pool(client, task_id: int, intent: str) -> list[dict]:
    found = await call(client, "get_messages", box="pool", task_id=task_id, limit=100)
    return [m for m in found["messages"] if m["intent"] == intent]


async def test_a_buggy_commit_fails_on_the_repos_tests_the_fix_is_merged_and_a_conflicting_card_goes_back(
    connect, reviewer, board, tmp_path
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        one, alice_token = await card_on(alice, board, "document add")
        two, bob_token = await card_on(bob, board, "document add too")
        # bob branches from the same start; his change touches the same lines as alice's
        bob_sha = work_on(
            repo,
            "hb/bob/2",
            tmp_path / "wt-bob",
            {"calc.py": CALC.replace("def add(a, b):\n", 'def add(a, b):\n    """Add two numbers."""\n')},
        )
        # alice's first commit breaks add: the repository's own tests say so, and main does not move
        buggy = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": CALC.replace("a + b", "a - b")})
        await call(alice, "complete_task", task_id=one, token=alice_token, output="documented add", ref="hb/alice/1")
        trail = await verdict(alice, one)
        first = trail["rounds"][-1]
        assert first["verdict"] == "FAIL"
        tests = critic(first, "acceptance")
        assert "the repository's tests `python -m pytest -q`" in tests["summary"]
        failed = {i["location"]: i["description"] for i in tests["issues"]}
        assert "expected 5, got -1" in failed["tests/test_calc.py::test_add"]
        card = await settled(alice, one)
        assert card["status"] == "in_progress" and card["assignee"] == "alice"
        assert card["commit"]["sha"] == buggy and card["commit"]["ref"] == "hb/alice/1"
        assert [f["path"] for f in card["commit"]["files"]] == ["calc.py"]
        assert "-    return a + b" in card["commit"]["diff"] and "+    return a - b" in card["commit"]["diff"]
        assert git(repo, "rev-parse", "main") == start
        # the pin keeps the commit whatever happens to the branch
        assert git(repo, "rev-parse", "refs/hiveboard/cards/1/1") == buggy

        # the fix passes, and the queue merges it: main holds it, and so do the main worktree's files
        fixed = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": FIXED}, "fix")
        await call(alice, "complete_task", task_id=one, token=alice_token, output="documented add", ref="hb/alice/1")
        card = await settled(alice, one)
        assert card["status"] == "done", card["history"][-3:]
        actions = [h["action"] for h in card["history"]]
        assert actions[-2:] == ["in the merge queue of calc", "merged"]
        assert is_ancestor(repo, fixed) and (repo / "calc.py").read_text() == FIXED
        assert git(repo, "status", "--porcelain") == ""
        assert (await pool(alice, one, "approval"))[-1]["content"].startswith(f"task {one} is merged")
        # the test fixed between the rounds became a lesson, read from what the two commits changed
        with board.store.read() as db:
            taught = [
                r[0] for r in db.execute("SELECT text FROM memory_items WHERE kind = 'lesson' AND task_id = ?", [one])
            ]
        assert any("changed `return a - b` to" in t and "return a + b` in add" in t for t in taught), taught

        # bob's commit passes its review on its own tree, but conflicts with main now: back to bob, naming the file
        merged = git(repo, "rev-parse", "main")
        await call(bob, "complete_task", task_id=two, token=bob_token, output="documented add", ref="hb/bob/2")
        card = await settled(bob, two)
        assert card["status"] == "in_progress" and card["assignee"] == "bob"
        assert card["history"][-1]["action"] == "merge conflict"
        brief = (await pool(bob, two, "critique"))[-1]
        assert "conflicts with the current main in calc.py" in brief["content"]
        assert "complete_task again" in brief["content"]
        assert git(repo, "rev-parse", "main") == merged and not is_ancestor(repo, bob_sha)
        review = await call(bob, "get_review", task_id=two, full=True)
        assert review["rounds"][-1]["verdict"] == "PASS"  # the review passed; the merge sent it back


async def test_a_merge_result_whose_tests_fail_goes_back_with_the_failing_output(connect, reviewer, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("bob", review=engine) as bob:
        one, alice_token = await card_on(alice, board, "rename add to plus")
        two, bob_token = await card_on(bob, board, "test add with negatives")
        work_on(
            repo,
            "hb/alice/1",
            tmp_path / "wt-alice",
            {"calc.py": CALC.replace("def add", "def plus"), "tests/test_calc.py": TESTS.replace("add", "plus")},
        )
        work_on(
            repo,
            "hb/bob/2",
            tmp_path / "wt-bob",
            {
                "tests/test_negative.py": "from calc import add\n\n\ndef test_negative():\n    assert add(-2, -3) == -5\n"
            },
        )
        await call(alice, "complete_task", task_id=one, token=alice_token, output="renamed", ref="hb/alice/1")
        assert (await settled(alice, one))["status"] == "done"
        merged = git(repo, "rev-parse", "main")
        # each change passes on its own; together the new test imports a name main no longer has
        await call(bob, "complete_task", task_id=two, token=bob_token, output="tested", ref="hb/bob/2")
        card = await settled(bob, two)
        brief = (await pool(bob, two, "critique"))[-1]["content"]
    assert card["status"] == "in_progress" and card["history"][-1]["action"] == "merge result failed its tests"
    assert "fails the repository's tests" in brief and "test_negative" in brief and "add" in brief
    assert git(repo, "rev-parse", "main") == merged


async def test_manual_mode_leaves_the_branch_for_a_person(connect, reviewer, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo, merge="manual")
    start = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "document add")
        sha = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": FIXED})
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented", ref="hb/alice/1")
        card = await settled(alice, task_id)
    assert card["status"] == "done"
    assert f"commit {sha} (hb/alice/1) is left unmerged" in card["history"][-1]["note"]
    assert git(repo, "rev-parse", "main") == start and git(repo, "rev-parse", "hb/alice/1") == sha
    assert board.merges.of_task(task_id) == []


async def test_a_card_that_needs_approval_is_merged_once_a_person_approves_and_its_main_worktree_is_clean(
    connect, reviewer, board, tmp_path
):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    start = git(repo, "rev-parse", "main")
    engine = reviewer(TESTS_ONLY)
    async with connect("alice", review=engine) as alice, connect("lee", role="human", review=engine) as lee:
        await call(lee, "whoami")  # a person, registered
        task_id, token = await card_on(alice, board, "document add", needs_approval=True)
        sha = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": FIXED})
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented", ref="hb/alice/1")
        card = await settled(alice, task_id)
        assert card["status"] == "needs_human" and git(repo, "rev-parse", "main") == start  # not before the person
        # the person at the gate sees the commit's diff, and Pass names the commit it approves
        page = await anyio.to_thread.run_sync(card_page, board, task_id, Viewer("lee", "csrf", False))
        assert 'id="commit"' in page and "calc.py" in page and "The sum of a and b." in page
        assert f"commit {sha[:12]}, 1 file changed" in page
        assert board.decisions.approval(task_id).commit == sha
        # someone edits a tracked file in the main worktree, where main is checked out: the merge waits for them
        (repo / "calc.py").write_text(CALC + "# local edit\n")
        await anyio.to_thread.run_sync(board.decisions.decide, "lee", task_id, "pass")
        card = await settled(alice, task_id)
        assert card["status"] == "needs_human" and card["history"][-1]["action"] == "merge blocked"
        assert f"checked out in {repo}" in card["blocked_reason"] and "commit or stash there" in card["blocked_reason"]
        assert git(repo, "rev-parse", "main") == start
        git(repo, "checkout", "--", "calc.py")
        await anyio.to_thread.run_sync(board.decisions.decide, "lee", task_id, "pass")
        card = await settled(alice, task_id)
    assert card["status"] == "done", card["history"][-3:]
    assert [h["action"] for h in card["history"][-2:]] == ["passed by a person, to the merge queue", "merged"]
    assert is_ancestor(repo, sha) and (repo / "calc.py").read_text() == FIXED


async def test_analysers_read_the_changed_files_and_say_which_lines_the_diff_changed(
    connect, reviewer, board, tmp_path, fake_llm: FakeLLM
):
    broken = "\n\ndef broken():\n    return missing_name\n\n\ndef unsafe(text):\n    return eval(text)\n"
    repo = make_repo(
        tmp_path / "calc",
        {
            "calc.py": CALC + broken,
            "other.py": "def also():\n    return undefined_elsewhere\n",
            "tests/test_calc.py": TESTS,
        },
    )
    register(board, repo)
    config = ReviewConfig(
        critics={
            **{k: v for k, v in NO_BUILTINS.items() if k not in ("ruff", "bandit")},
            "model": llm_critic(fake_llm, "accuracy"),
        },
        task_types={"code": ["correctness", "security", "accuracy"]},
    )
    engine = reviewer(config)
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "add sub")
        added = "\n\ndef sub(a, b):\n    return a - c\n"
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": CALC + broken + added})
        await call(alice, "complete_task", task_id=task_id, token=token, output="added sub", ref="hb/alice/1")
        trail = await verdict(alice, task_id)
    ruff = critic(trail["rounds"][-1], "ruff")
    found = {i["location"]: i for i in ruff["issues"]}
    lines = (CALC + broken + added).splitlines()
    new_line, old_line = lines.index("    return a - c") + 1, lines.index("    return missing_name") + 1
    assert found[f"calc.py:{new_line}"]["changed_line"] is True
    assert found[f"calc.py:{new_line}"]["severity"] == "critical"
    assert found[f"calc.py:{old_line}"]["changed_line"] is False
    assert found[f"calc.py:{old_line}"]["severity"] == "minor"  # there before this commit: reported, not blocking
    assert "did not change" in found[f"calc.py:{old_line}"]["description"]
    assert not any(loc.startswith("other.py") for loc in found)  # a file the commit did not touch is not read
    # a security finding keeps its severity on any line of a changed file (the card's creator can waive its rule)
    [unsafe] = critic(trail["rounds"][-1], "bandit")["issues"]
    assert unsafe["location"] == f"calc.py:{lines.index('    return eval(text)') + 1}"
    assert unsafe["changed_line"] is False and unsafe["severity"] == "major"
    assert trail["rounds"][-1]["verdict"] == "FAIL"
    # the model saw the diff and the changed file
    prompt = "\n".join(m["content"] for m in fake_llm.calls("accuracy")[-1]["body"]["messages"])
    assert "diff --git a/calc.py b/calc.py" in prompt and "+    return a - c" in prompt
    assert "def mul(a, b)" in prompt


async def test_a_merge_whose_worker_died_is_taken_over_and_merged_once(connect, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    config = TESTS_ONLY.model_copy(update={"worker_lease": 1, "poll_seconds": 0.1, "agent_deadline": 0})
    engine = ReviewEngine(board, config)
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(alice, board, "document add")
        sha = work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": FIXED})
        await call(alice, "complete_task", task_id=task_id, token=token, output="documented", ref="hb/alice/1")
        job = await anyio.to_thread.run_sync(board.reviews.claim_job, "reviewer", 30)
        await anyio.to_thread.run_sync(engine.run, job, "reviewer")  # passes: the commit waits in the queue

        class DiesAfterTheSwap(MergeQueue):
            def _merged(self, m, worker, repo, base, sha, how):
                raise KeyboardInterrupt  # the process ends between advancing main and saying so

        dying = DiesAfterTheSwap(board, config, engine.git, engine.merge_queue().tests)
        merge = await anyio.to_thread.run_sync(board.merges.claim, "node-1", config.worker_lease)
        with pytest.raises(KeyboardInterrupt):
            await anyio.to_thread.run_sync(dying.merge, merge, "node-1")
        assert is_ancestor(repo, sha)  # main moved; the card still waits in review
        assert (await call(alice, "get_task", task_id=task_id))["status"] == "review"
        # another node takes the merge once node-1's lease has run out, and does not merge again
        worker = MergeWorker(engine.merge_queue(), "node-2").start()
        try:
            card = await settled(alice, task_id)
        finally:
            worker.stop()
    assert card["status"] == "done" and card["history"][-1]["action"] == "merged"
    [merge] = board.merges.of_task(task_id)
    assert merge["status"] == "merged" and merge["attempts"] == 2 and merge["worker"] == "node-2"
    assert git(repo, "rev-list", "--merges", "--count", "main") == "1"
    assert merge["merged_sha"] == git(repo, "rev-parse", "main")


async def test_a_commit_review_runs_the_cards_own_checks_against_the_tree(connect, reviewer, board, tmp_path):
    repo = make_repo(tmp_path / "calc")
    register(board, repo)
    engine = reviewer(TESTS_ONLY)
    spec = {
        "files": [
            {
                "name": "test_spec.py",
                "content": "from calc import mul\n\n\ndef test_square():\n    assert mul(4, 4) == 16\n",
            }
        ]
    }
    async with connect("alice", review=engine) as alice:
        task_id, token = await card_on(
            alice,
            board,
            "add sub",
            acceptance_criteria=["$ python -c 'import calc; assert calc.sub(5, 3) == 2'"],
            acceptance_tests=spec,
        )
        work_on(repo, "hb/alice/1", tmp_path / "wt-alice", {"calc.py": CALC + "\n\ndef sub(a, b):\n    return b - a\n"})
        await call(alice, "complete_task", task_id=task_id, token=token, output="added sub", ref="hb/alice/1")
        trail = await verdict(alice, task_id)
    tests = critic(trail["rounds"][-1], "acceptance")
    assert "1 of 3 runs failed" in tests["summary"], tests["summary"]
    assert "the repository's tests `python -m pytest -q`: passed" in tests["summary"]
    assert "the card's acceptance tests: passed" in tests["summary"]
    assert "`python -c 'import calc; assert calc.sub(5, 3) == 2'`: failed" in tests["summary"]
