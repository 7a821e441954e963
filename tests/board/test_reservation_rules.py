"""Path reservations on the board: the glob overlap test (exact, symmetric), and the rules of reserving,
releasing and ending with a card (board/reservations.py)."""

from __future__ import annotations

import time

import pytest

from hiveboard.board.db import Store
from hiveboard.board.errors import Conflict, InvalidInput
from hiveboard.board.models import NewTask
from hiveboard.board.reservations import (
    MAX_LIVE,
    MAX_PATTERNS,
    TooComplex,
    blocking,
    budget,
    covers,
    normalize,
    overlap,
    scope_of,
)
from hiveboard.board.tasks import Board

pytestmark = pytest.mark.backends("sqlite", "postgresql")

# (a, b, whether some path matches both): each checked both ways round
OVERLAPS = [
    # `**` on either side, at either end, and in the middle
    ("src/**", "src/a.py", True),
    ("**", "README.md", True),
    ("**/*.py", "a/b/c.py", True),
    ("**/*.py", "c.py", True),
    ("**/*.py", "docs/readme.md", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/x/y/c.py", False),
    ("a/**/b", "a/x/y/c", True),  # a directory: a/x/y/c/b
    ("src/**/test_*.py", "src/*/test_a.py", True),
    ("src/**/test_*.py", "lib/*/test_a.py", False),
    ("**/x/**", "**/y/**", True),  # a/x/y/b
    ("x/**", "**/y", True),  # x/y
    ("x/**/q", "**/y", False),  # every path of the left ends in q
    ("src/*/x", "src/**/y", False),
    # `*` stays inside one segment
    ("src/*.py", "src/a/b.py", False),
    ("src/*", "src/a/b.py", False),
    ("src/*", "src/a", True),
    ("src/a*", "src/b*", False),
    ("*a", "b*", True),  # ba
    ("x*", "*y", True),  # xy
    ("*.py", "*.md", False),
    ("*", "*", True),
    ("a*b*c", "*c*b*", True),  # acbc
    ("a*b", "a*c", False),
    # `?`: exactly one character
    ("a?c", "abc", True),
    ("a?c", "ac", False),
    ("a?c", "a/c", False),
    ("???", "ab*", True),
    ("??", "abc", False),
    # classes, negation, ranges
    ("[ab]x", "cx", False),
    ("[ab]x", "bx", True),
    ("[!ab]x", "cx", True),
    ("[^ab]x", "ax", False),
    ("[!ab]x", "[ab]x", False),
    ("[a-c]", "[c-e]", True),
    ("[a-c]", "[d-f]", False),
    ("a/[a-c]/*.py", "a/b/c.py", True),
    ("a/[a-c]/*.py", "a/d/c.py", False),
    ("[]]", "]", True),  # a ']' first in a class is literal
    ("[!]]", "]", False),
    ("x[!.]y", "x.y", False),
    # a backslash makes the next character literal
    ("a\\*", "a*", True),
    ("a\\*", "ab", False),
    ("a\\?", "ab", False),
    ("\\[x]", "?x?", True),
    ("\\[x]", "[x]", False),  # the class [x] is the name x
    ("\\[x]", "x", False),
    # directories cover what is under them; a file does not
    ("src", "src/x/y.py", True),
    ("src/", "src/x", True),
    ("docs/v1.2/", "docs/v1.2/x.md", True),
    ("docs/v1.2", "docs/v1.2/x.md", False),  # a name with a dot is a file unless it ends in /
    ("src/app.py", "src/**/test_*.py", False),
    ("src/app.py", "src/app.py", True),
    ("src/x", "srcx", False),
    ("src/api/**", "src/api", True),
]


@pytest.mark.parametrize(("a", "b", "meet"), OVERLAPS)
def test_overlap_is_exact_and_symmetric(a, b, meet):
    x, y = normalize(a), normalize(b)
    assert overlap(x, y) is meet, (x, y)
    assert overlap(y, x) is meet, (y, x)
    assert overlap(x, x) and overlap(y, y)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("./src//a/./b.py", "src/a/b.py"),
        ("src/api", "src/api/**"),
        ("src/api/", "src/api/**"),
        ("src/api/.", "src/api/**"),
        ("src/api/**", "src/api/**"),
        ("a/**/**/b", "a/**/b"),
        ("Makefile", "Makefile/**"),
        (".github", ".github/**"),
        ("src/*.py", "src/*.py"),
        ("src/*", "src/*"),
    ],
)
def test_a_pattern_has_one_canonical_form(raw, canonical):
    assert normalize(raw) == canonical
    assert normalize(canonical) == canonical


@pytest.mark.parametrize(
    ("pattern", "path", "covered"),
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "srcx/a.py", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/a/b.py", False),
        ("docs", "docs/x/y.md", True),
        ("a.txt", "a.txt", True),
        ("a.txt", "b/a.txt", False),
        ("**/*.lock", "x/y/poetry.lock", True),
        ("src/[ab].py", "src/*.py", False),  # a staged path is a name, not a pattern: its * is a character
        ("src/\\*.py", "src/*.py", True),
    ],
)
def test_a_file_is_covered_by_what_matches_it(pattern, path, covered):
    assert covers(normalize(pattern), path) is covered


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("C:/x", "is absolute"),
        ("~/x", "is absolute"),
        ("../x", "'..' segment"),
        ("a/../b", "'..' segment"),
        (".", r"names no path; use \*\*"),
        ("./", "names no path"),
        ("a[b", "never closed"),
        ("a\\", "backslash"),
        ("[z-a]", "matches no path"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("x" * 301, "at most 300"),
    ],
)
def test_a_bad_pattern_is_refused_in_one_sentence(raw, says):
    with pytest.raises(InvalidInput, match=says) as refused:
        normalize(raw)
    assert "\n" not in str(refused.value)


def test_the_walks_are_bounded():
    hostile = normalize("*a" * 140 + "b"), normalize("*a" * 140 + "c")
    assert overlap(*hostile) is False  # exact, however many wildcards
    with pytest.raises(TooComplex), budget(1_000):
        overlap(normalize("*b" * 140 + "q"), normalize("*b" * 140 + "r"))
    assert overlap(normalize("x/**"), normalize("x/y"))  # the budget ended with its block


def test_a_reservations_scope_is_its_cards_repository():
    assert scope_of(None) == "" and scope_of({"id": 1}) == "" and scope_of({"id": 1, "repo": None}) == ""
    assert scope_of({"id": 1, "repo": "api"}) == "api"


# ----------------------------------------------------------------------------- rules on the board


def rows_of(board: Board) -> list[dict]:
    cursor = board.store.db.execute("SELECT * FROM reservations ORDER BY id")
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, r)) for r in cursor.fetchall()]


def held_card(board: Board, agent: str, title: str = "work", paths: tuple[str, ...] = ()) -> tuple[int, int]:
    task_id = board.create(agent, NewTask(title=title, paths=list(paths))).id
    return task_id, board.claim(agent, task_id=task_id).token


def test_an_exclusive_overlap_refuses_the_whole_call_naming_holder_card_and_until(board):
    task_id, _ = held_card(board, "alice")
    board.reservations.reserve("alice", ["src/api/"], reason="auth refactor")
    before = rows_of(board)
    with pytest.raises(Conflict) as refused:
        board.reservations.reserve("bob", ["docs/new.md", "src/api/auth.py"])
    text = str(refused.value)
    assert "src/api/auth.py overlaps src/api/**" in text and "alice" in text and f"task {task_id}" in text
    until = before[0]["expires_at"]
    assert time.strftime("%Y-%m-%dT%H:%M", time.gmtime(until)) in text and text.count("Z") == 1  # UTC
    assert "auth refactor" in text and "nothing was reserved" in text and "\n" not in text
    assert rows_of(board) == before  # docs/new.md was not reserved either


def test_shared_reservations_coexist_and_exclusive_meets_shared_refused_both_ways(board):
    board.reservations.reserve("alice", ["docs/**"], exclusive=False)
    board.reservations.reserve("bob", ["docs/guide.md"], exclusive=False)
    with pytest.raises(Conflict, match="held shared by alice.*reserve it shared"):
        board.reservations.reserve("carol", ["docs/guide.md"])
    board.reservations.reserve("carol", ["src/**"])
    with pytest.raises(Conflict, match="held exclusively by carol"):
        board.reservations.reserve("dave", ["src/x.py"], exclusive=False)
    assert {(r["agent"], r["pattern"]) for r in rows_of(board)} == {
        ("alice", "docs/**"),
        ("bob", "docs/guide.md"),
        ("carol", "src/**"),
    }


def test_the_same_agent_reserving_again_extends_and_its_own_patterns_never_conflict(board):
    first = board.reservations.reserve("alice", ["src/**"], ttl_seconds=600).reservations[0]
    board.reservations.reserve("alice", ["./src/", "src/a.py"], ttl_seconds=3600)
    shorter = board.reservations.reserve("alice", ["src"], ttl_seconds=60).reservations[0]
    live = rows_of(board)
    assert [r["pattern"] for r in live] == ["src/**", "src/a.py"]  # one row per pattern
    assert shorter.until > first.until  # extended to the later end, never shortened


def test_release_makes_the_paths_available_at_once(board):
    board.reservations.reserve("alice", ["src/**", "docs/a.md"])
    with pytest.raises(Conflict):
        board.reservations.reserve("bob", ["src/x.py"])
    assert board.reservations.release("alice", ["src/"]).released == ["src/**"]
    board.reservations.reserve("bob", ["src/x.py"])
    with pytest.raises(InvalidInput, match=r"you hold no reservation of 'lib' \(lib/\*\*\); you hold docs/a.md"):
        board.reservations.release("alice", ["docs/a.md", "lib"])
    assert [r["pattern"] for r in rows_of(board) if r["released_at"] is None] == ["docs/a.md", "src/x.py"]


def test_a_reservation_ends_with_its_cards_end(board):
    alice, token = held_card(board, "alice")
    board.reservations.reserve("alice", ["a/**"])
    board.release("alice", alice, token)  # back to todo
    board.reservations.reserve("bob", ["a/x.py"])

    done, token = held_card(board, "carol")
    board.reservations.reserve("carol", ["b/**"])
    board.complete("carol", done, token, "did it")  # no review here: done
    board.reservations.reserve("bob", ["b/x.py"])

    escalated, token = held_card(board, "dave")
    board.reservations.reserve("dave", ["c/**"])
    board.update("dave", escalated, token=token, status="needs_human", reason="which API?")
    board.reservations.reserve("bob", ["c/x.py"])

    blocked, token = held_card(board, "erin")
    board.reservations.reserve("erin", ["d/**"])
    board.update("erin", blocked, token=token, status="blocked", reason="waits on d")
    with pytest.raises(Conflict, match="erin"):  # a blocked card is still held
        board.reservations.reserve("bob", ["d/x.py"])
    ended = {r["pattern"]: r["released_at"] for r in rows_of(board)}
    assert ended["a/**"] and ended["b/**"] and ended["c/**"] and ended["d/**"] is None


def test_a_reservation_ends_with_its_cards_lease(store_target):
    board = Board(Store(store_target), lease_seconds=1)
    try:
        task_id, _ = held_card(board, "alice")
        board.reservations.reserve("alice", ["src/**"])
        lease_end = board.store.db.execute("SELECT lease_expires_at FROM tasks WHERE id = ?", [task_id]).fetchone()[0]
        while time.time() <= lease_end:  # the lease runs out
            time.sleep(0.05)
        # before any sweep, the live check already ignores it: the agent no longer holds the card
        assert rows_of(board)[0]["released_at"] is None
        assert blocking(board.store.db, ["src/a.py"], "bob", None) == []
        board.reservations.reserve("bob", ["src/a.py"])  # a write sweeps the lease first
        assert board.get(task_id).status == "todo"
        assert rows_of(board)[0]["released_at"] is not None
    finally:
        board.store.close()


def test_a_reservation_without_a_card_ends_with_its_ttl(board):
    board.reservations.reserve("alice", ["src/**"], ttl_seconds=1)
    end = rows_of(board)[0]["expires_at"]
    while time.time() <= end:
        time.sleep(0.05)
    board.reservations.reserve("bob", ["src/**"])
    with pytest.raises(Conflict, match="bob"):
        board.reservations.reserve("alice", ["src/**"])
    board.reservations.release("bob", ["src/**"])
    board.reservations.reserve("alice", ["src/**"])
    # alice's expired row made way for her new one: one unreleased row per agent and pattern
    assert [(r["agent"], r["released_at"] is None) for r in rows_of(board)] == [
        ("alice", False),
        ("bob", False),
        ("alice", True),
    ]


def test_which_card_a_reservation_is_tied_to(board):
    assert board.reservations.reserve("alice", ["x.txt"]).reservations[0].task_id is None  # no card: TTL only
    first, _ = held_card(board, "alice", "one")
    assert board.reservations.reserve("alice", ["y.txt"]).reservations[0].task_id == first
    second, _ = held_card(board, "alice", "two")
    with pytest.raises(InvalidInput, match=f"you hold tasks {first}, {second}; say which one .* with task_id"):
        board.reservations.reserve("alice", ["z.txt"])
    assert board.reservations.reserve("alice", ["z.txt"], task_id=second).reservations[0].task_id == second
    bobs, _ = held_card(board, "bob", "bob's")
    with pytest.raises(InvalidInput, match=f"task {bobs} is not a card you hold .*held by bob"):
        board.reservations.reserve("alice", ["w.txt"], task_id=bobs)
    assert "w.txt" not in {r["pattern"] for r in rows_of(board)}


def test_bad_input_is_refused_and_nothing_is_written(board):
    board.reservations.reserve("alice", ["keep.txt"])
    before = rows_of(board)
    for args, says in [
        (dict(paths=[]), "paths is empty"),
        (dict(paths=["x"] * (MAX_PATTERNS + 1)), f"at most {MAX_PATTERNS}"),
        (dict(paths=["ok.txt", "/etc/passwd"]), "is absolute"),
        (dict(paths=["ok.txt", "../up.txt"]), "'..' segment"),
        (dict(paths=["ok.txt"], ttl_seconds=0), "ttl_seconds must be"),
        (dict(paths=["ok.txt"], reason="r" * 501), "reason is 501 characters"),
        (dict(paths=["ok.txt"], task_id=999), "task 999 does not exist"),
    ]:
        with pytest.raises(Exception, match=says) as refused:
            board.reservations.reserve("bob", **args)
        assert "\n" not in str(refused.value)
    with pytest.raises(InvalidInput, match="is absolute"):
        board.create("bob", NewTask(title="t", paths=["ok/", "/abs"]))
    assert rows_of(board) == before
    assert board.store.db.execute("SELECT count(*) FROM tasks").fetchone()[0] == 0


def test_an_agent_holds_a_bounded_number_of_live_reservations(board):
    for n in range(MAX_LIVE // MAX_PATTERNS):
        board.reservations.reserve("alice", [f"d{n}/f{i}.txt" for i in range(MAX_PATTERNS)])
    with pytest.raises(InvalidInput, match=f"you would hold {MAX_LIVE + 1} live reservations here, at most {MAX_LIVE}"):
        board.reservations.reserve("alice", ["one-more.txt"])
    board.reservations.reserve("alice", ["d0/f0.txt"])  # extending one is not another


def test_a_card_shows_its_paths_and_the_reservations_on_them(board):
    task_id = board.create("carol", NewTask(title="api", paths=["src/api/", "docs/api.md"])).id
    board.reservations.reserve("bob", ["src/api/auth.py"], exclusive=False)
    board.reservations.reserve("dave", ["lib/**"])
    card = board.get(task_id)
    assert card.paths == ["src/api/**", "docs/api.md"]
    assert [(r.agent, r.pattern) for r in card.reservations] == [("bob", "src/api/auth.py")]
    claim = board.claim("alice", task_id=task_id)
    assert [r.agent for r in claim.reservations] == ["bob"] and "reserved by bob" in claim.message
    board.reservations.reserve("alice", ["tests/**"])  # tied to the card, though not among its paths
    assert {r.pattern for r in board.get(task_id).reservations} == {"src/api/auth.py", "tests/**"}
    view = board.board()
    assert view.reservations_live == 3 and {r.agent for r in view.reservations} == {"alice", "bob", "dave"}


def test_hostile_patterns_cannot_hold_the_write_lock_long(board):
    board.reservations.reserve("alice", [("*a" * 140) + f"b{i}" for i in range(MAX_PATTERNS)])
    before = rows_of(board)
    with pytest.raises(InvalidInput, match=r"takes more than 1,000,000 steps; reserve fewer patterns") as refused:
        board.reservations.reserve("bob", [("*a" * 140) + f"c{i}" for i in range(MAX_PATTERNS)])
    assert "nothing was reserved" in str(refused.value)
    assert rows_of(board) == before
    board.reservations.reserve("bob", ["src/**"])  # a plain pattern is checked against them all at once


def test_a_refusal_quotes_the_holders_reason_on_one_line(board):
    board.reservations.reserve("alice", ["src/**"], reason="rewriting\nthe app\tfrom scratch")
    with pytest.raises(Conflict, match=r"\(rewriting the app from scratch\)") as refused:
        board.reservations.reserve("bob", ["src/a.py"])
    assert "\n" not in str(refused.value)
