"""What a person at the approval gate judges, read from the board: a card's hand-ins (each review round's
snapshot of its files, and a completion no review round took), what a pass approves, and a pass refused
when it was confirmed for work the card has since moved on from."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hiveboard.board.errors import Conflict, IllegalTransition
from hiveboard.board.models import AcceptanceTests, Artifact, NewTask
from hiveboard.board.models import TestFile as SpecFile  # not a pytest class
from hiveboard.board.review_models import Synthesis
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.backends("sqlite", "postgresql")


def review(board: Board, outcome: str, verdict: str) -> None:
    job = board.reviews.claim_job("worker", 30)
    board.reviews.begin(job, "worker", [], [], None)
    board.reviews.finish(job, "worker", Synthesis(verdict=verdict, score=5, brief="fix it"), outcome, verdict, [])


def files(*pairs: tuple[str, str]) -> list[Artifact]:
    return [Artifact(name=name, kind="code", content=text) for name, text in pairs]


def test_each_round_keeps_its_files_and_a_pass_names_the_latest(board):
    board.agents.new_token("lee", role="human")
    card = board.create("bob", NewTask(title="calc"))
    assert board.reviews.hand_ins(card.id) == []
    claim = board.claim("bob", card.id)
    board.complete(
        "bob", card.id, claim.token, "v1", artifacts=files(("calc.py", "def calc(): return 1\n")), to_status="review"
    )
    review(board, "in_progress", "FAIL")
    board.complete(
        "bob",
        card.id,
        claim.token,
        "v2",
        artifacts=files(("calc.py", "def calc(): return 2\n"), ("test_calc.py", "def test(): pass\n")),
        to_status="review",
    )
    review(board, "needs_human", "PASS")

    latest, before = board.reviews.hand_ins(card.id)
    assert (latest.round, latest.verdict, [a.name for a in latest.artifacts]) == (
        2,
        "PASS",
        ["calc.py", "test_calc.py"],
    )
    assert (before.round, before.verdict, before.artifacts[0].content) == (1, "FAIL", "def calc(): return 1\n")
    assert [h.round for h in board.reviews.hand_ins(card.id, 1)] == [2]

    approval = board.decisions.approval(card.id)
    assert approval.text == f"round 2 of card #{card.id}, 2 files"
    assert approval.key == f"review-{latest.review_id}" and approval.files == ["calc.py", "test_calc.py"]

    # a confirmation of round 1 (or of anything else) does not pass round 2, and writes nothing
    version = board.summary(card.id).version
    for stale in (f"review-{before.review_id}", "claim-1", "hand-in-1", "</p><script>", ""):
        with pytest.raises(Conflict, match=f"task {card.id} moved on .* round 2 of card #{card.id}, 2 files"):
            board.decisions.decide("lee", card.id, "pass", "ok", confirm=stale)
    assert board.summary(card.id).version == version and board.summary(card.id).status == "needs_human"
    assert board.decisions.decide("lee", card.id, "pass", "ok", confirm=approval.key).status == "done"
    with pytest.raises(IllegalTransition, match="not needs_human"):
        board.decisions.approval(card.id)


def test_a_hand_in_no_review_took_comes_first_and_a_new_hand_in_moves_the_pass_on(board):
    """A card sent back after its review and handed in again straight to a person (no review ran): that
    completion is the latest hand-in; a later claim that hands in nothing keeps it the latest, and a later
    claim's completion is another one."""
    board.agents.new_token("lee", role="human")
    card = board.create("bob", NewTask(title="notes"))
    claim = board.claim("bob", card.id)
    board.complete("bob", card.id, claim.token, "v1", artifacts=files(("notes.md", "# one\n")), to_status="review")
    review(board, "needs_human", "PASS")
    board.decisions.decide("lee", card.id, "send_back", "add the date")
    claim = board.claim("bob", card.id)
    board.complete("bob", card.id, claim.token, "v2", artifacts=files(("notes.md", "# two\n")), to_status="needs_human")

    latest, before = board.reviews.hand_ins(card.id)
    assert (latest.review_id, latest.round, latest.artifacts[0].content) == (None, None, "# two\n")
    assert latest.key.startswith("hand-in-") and (before.key, before.round) == (f"review-{before.review_id}", 1)
    first = board.decisions.approval(card.id)
    assert first.key == latest.key and first.text == (
        f"the work handed in on card #{card.id} without a review round, 1 file"
    )

    # claimed again and handed to a person with nothing new: the work to approve is still the last hand-in
    board.decisions.decide("lee", card.id, "send_back", "and the author")
    claim = board.claim("bob", card.id)
    board.update("bob", card.id, token=claim.token, status="needs_human", reason="nothing to add")
    assert board.reviews.hand_ins(card.id, 1)[0].artifacts[0].content == "# two\n"
    assert board.decisions.approval(card.id) == first

    board.decisions.decide("lee", card.id, "send_back", "really, the author")
    claim = board.claim("bob", card.id)
    board.complete(
        "bob", card.id, claim.token, "v3", artifacts=files(("notes.md", "# three\n")), to_status="needs_human"
    )
    with pytest.raises(Conflict, match="moved on"):
        board.decisions.decide("lee", card.id, "pass", confirm=first.key)  # confirmed on the earlier hand-in
    assert (
        board.decisions.decide("lee", card.id, "pass", confirm=board.decisions.approval(card.id).key).status == "done"
    )


def test_a_card_escalated_before_any_hand_in_approves_nothing_handed_in(board):
    card = board.create("bob", NewTask(title="which way"))
    claim = board.claim("bob", card.id)
    board.update("bob", card.id, token=claim.token, status="needs_human", reason="v1 or v2?")
    approval = board.decisions.approval(card.id)
    assert (approval.handed_in, approval.files, approval.text) == (
        False,
        [],
        f"card #{card.id} as it stands, nothing handed in",
    )


def test_hidden_acceptance_tests_are_read_whole_only_through_the_web_view(board):
    tests = AcceptanceTests(files=[SpecFile(name="test_secret.py", content="def test_x(): assert 1\n")], hidden=True)
    card = board.create("ann", NewTask(title="hidden", acceptance_tests=tests))
    seen = board.get(card.id, viewer="bob")
    assert seen.acceptance_tests is None and seen.hidden_tests == 1  # an agent: only that they exist
    assert board.views.acceptance_tests(card.id) == tests


def test_people_passing_one_confirmed_round_at_once_pass_it_once(board):
    """Eight people confirm the same round and press Pass together: one pass moves the card, the others are
    refused (the card no longer waits on anyone), and its history holds one pass."""
    people = [f"p{n}" for n in range(8)]
    for name in people:
        board.agents.new_token(name, role="human")
    card = board.create("bob", NewTask(title="release"))
    claim = board.claim("bob", card.id)
    board.complete("bob", card.id, claim.token, "v1", artifacts=files(("r.md", "1.2\n")), to_status="review")
    review(board, "needs_human", "PASS")
    key = board.decisions.approval(card.id).key
    start = threading.Barrier(len(people))

    def press(name: str) -> str:
        start.wait()
        try:
            return board.decisions.decide(name, card.id, "pass", confirm=key).status
        except IllegalTransition as refused:
            return str(refused)

    with ThreadPoolExecutor(len(people)) as pool:
        said = list(pool.map(press, people))
    assert said.count("done") == 1, said
    assert all("not needs_human" in s for s in said if s != "done"), said
    passes = [e for e in board.get(card.id).history if e.action == "passed by a person"]
    assert len(passes) == 1
