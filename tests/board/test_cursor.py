"""Page cursors: what a listing hands out comes back as it was; anything else is refused with one sentence."""

from __future__ import annotations

import base64
import json

import pytest

from hiveboard.board.cursor import decode_cursor, encode_cursor
from hiveboard.board.errors import InvalidInput


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def test_a_cursor_round_trips():
    assert decode_cursor(encode_cursor(3, 42), "list_tasks") == (3, 42)
    assert decode_cursor(encode_cursor(0, 0), "get_messages") == (0, 0)
    assert decode_cursor(encode_cursor(7), "x", n=1) == (7,)


def test_cursors_already_handed_out_still_work():
    assert encode_cursor(3, 42) == b64("3:42")  # list_tasks's form
    assert decode_cursor(b64(json.dumps([1, 99])), "get_messages") == (1, 99)  # get_messages's JSON list


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        "",
        "é",
        b64("1"),
        b64("1:2:3"),
        b64("-1:2"),
        b64("1: 2"),
        b64("1:\u0665"),  # a digit, but not an ASCII one
        b64(f"1:{2**63}"),  # beyond an SQLite integer
        b64('[7, "x"]'),
        b64("[true, 1]"),
        b64("{}"),
    ],
)
def test_anything_else_is_refused_naming_the_tool(cursor):
    with pytest.raises(
        InvalidInput, match="cursor is not valid: pass the next_cursor value from the previous list_tasks"
    ):
        decode_cursor(cursor, "list_tasks")


def test_the_caller_can_refuse_parts_it_never_hands_out():
    with pytest.raises(InvalidInput, match="get_messages"):
        decode_cursor(encode_cursor(2, 5), "get_messages", valid=lambda parts: parts[0] in (0, 1))


def test_a_deeply_nested_cursor_is_refused_in_one_sentence():
    hostile = base64.urlsafe_b64encode(b"[" * 1000 + b"]" * 1000).decode()
    with pytest.raises(InvalidInput, match="cursor is not valid"):
        decode_cursor(hostile, "list_tasks")
