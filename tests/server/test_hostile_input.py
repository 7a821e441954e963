"""Every tool, every argument, hostile values, as raw JSON-RPC over streamable HTTP (bodies the Python
client would refuse to send). Counted as the issue counts them: unclean errors (a bare "Error executing
tool", a traceback, a protocol failure), writes on error (any table changed by a refused call) and
broken reads (another agent's reads failing afterwards). Goal: zero of each."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from conftest import agent_token

pytestmark = pytest.mark.slow

# Raw JSON text for each hostile value: the lone surrogate must be an escape in the body itself.
HOSTILE_TEXT = {
    "lone surrogate": '"bad \\ud800 text"',
    "NUL": '"a\\u0000b"',
    "oversized string": json.dumps("x" * 250_001),
    "many items": json.dumps(["x"] * 600),
    "deep object": "{" + '"a":{' * 12 + "}" * 13,
    "wrong type": '{"not": "what was asked"}',
    "negative": "-1",
    "huge number": str(2**70),
    "null": "null",
}

# A valid call of each tool; each argument in turn is replaced by each hostile value.
BASE = {
    "whoami": {"name": "alice", "role": "coder", "token": "t"},
    "create_task": {
        "title": "t",
        "description": "d",
        "task_type": "code",
        "priority": "low",
        "labels": ["a"],
        "depends_on": [1],
        "acceptance_criteria": ["c"],
        "assignee": "alice",
        "acceptance_tests": {"files": [{"name": "test_a.py", "content": "def test(): pass"}]},
    },
    "get_task": {"task_id": 1, "full": True, "history": 5},
    "list_tasks": {
        "status": "todo",
        "task_type": "code",
        "assignee": "alice",
        "label": "a",
        "ready": True,
        "limit": 5,
        "cursor": "MToy",
    },
    "get_board": {"top": 3},
    "claim_task": {"task_id": 1, "task_type": "code"},
    "release_task": {"task_id": 1, "token": 1, "reason": "r"},
    "update_task": {
        "task_id": 1,
        "token": 1,
        "note": "n",
        "status": "blocked",
        "reason": "r",
        "title": "t",
        "description": "d",
        "priority": "low",
        "labels": ["a"],
        "acceptance_criteria": ["c"],
        "expected_version": 1,
    },
    "complete_task": {
        "task_id": 1,
        "token": 1,
        "output": "o",
        "summary": "s",
        "artifacts": [{"name": "a.py", "kind": "code", "content": "x = 1"}],
        "helpful_lessons": [1],
    },
    "get_review": {"task_id": 1, "wait_seconds": 0},
    "submit_critique": {
        "review_id": 1,
        "lens": "security",
        "verdict": "PASS",
        "score": 5,
        "summary": "s",
        "issues": [],
        "resolutions": [],
    },
    "board_stats": {},
    "publish_message": {
        "intent": "info",
        "content": "c",
        "summary": "s",
        "recipient": "bob",
        "task_id": 1,
        "thread": "t",
        "reply_to": 1,
        "priority": "low",
        "metadata": {"k": "v"},
    },
    "get_messages": {
        "box": "inbox",
        "unread_only": True,
        "task_id": 1,
        "intent": "info",
        "thread": "t",
        "sender": "bob",
        "since": "2026-01-01T00:00:00Z",
        "full": False,
        "limit": 5,
        "ack": [1],
    },
    "subscribe": {"kind": "task", "value": "1", "unsubscribe": False},
    "query_memory": {
        "query": "q",
        "task_type": "code",
        "kinds": ["lesson"],
        "tags": ["a"],
        "k": 3,
        "include_deprecated": False,
        "mode": "keyword",
        "wait_seconds": 0,
    },
    "remember": {
        "items": [{"text": "t", "kind": "note", "title": "t", "task_type": "code", "tags": ["a"], "task_id": 1}]
    },
    "record_lesson": {"problem": "p", "fix": "f", "task_type": "code", "title": "t", "tags": ["a"], "task_id": 1},
}
TABLES = (
    "tasks",
    "task_history",
    "artifacts",
    "agents",
    "messages",
    "inbox",
    "subscriptions",
    "memory_items",
    "reviews",
    "critiques",
)


class Raw:
    """A raw streamable-HTTP JSON-RPC session (protocol 2025-11-25) for one agent."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.http = httpx.Client(
            timeout=120,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
            },
        )
        self.next_id = 0
        answer = self.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "1"},
                    },
                }
            )
        )
        assert "result" in answer, answer
        self.http.post(url, content='{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def send(self, body: str) -> dict:
        response = self.http.post(self.url, content=body.encode())
        if response.headers.get("mcp-session-id"):
            self.http.headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        assert response.status_code < 500 and response.text, (response.status_code, response.text[:300])
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"id"' in line)
        return json.loads(text)

    def call(self, tool: str, arguments_json: str) -> dict:
        self.next_id += 1
        return self.send(
            '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
            % (self.next_id, tool, arguments_json)
        )


def arguments_with(base: dict, name: str, hostile: str) -> str:
    parts = [f"{json.dumps(k)}:{hostile if k == name else json.dumps(v)}" for k, v in base.items()]
    return "{" + ",".join(parts) + "}"


def error_text(answer: dict) -> str | None:
    """The error the caller reads, or None if the call succeeded."""
    if "error" in answer:  # a JSON-RPC error (the body itself was refused)
        return answer["error"]["message"]
    result = answer["result"]
    return result["content"][0]["text"] if result.get("isError") else None


def test_hostile_arguments_to_every_tool_are_refused_cleanly_and_write_nothing(tmp_path, http_server):
    home = tmp_path / "home"
    url = http_server(home=home)
    alice, bob = Raw(url, agent_token(home, "alice")), Raw(url, agent_token(home, "bob"))
    assert error_text(alice.call("create_task", '{"title": "the first card"}')) is None
    assert error_text(bob.call("publish_message", '{"intent": "info", "content": "hello", "task_id": 1}')) is None
    db = sqlite3.connect(f"file:{home / 'hiveboard.db'}?mode=ro", uri=True)

    def rows() -> tuple[int, ...]:
        return tuple(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES) + (
            db.execute("SELECT coalesce(sum(version), 0) FROM tasks").fetchone()[0],
        )

    unclean, written, broken, refused, calls = [], [], [], [], 0
    for tool, base in BASE.items():
        for name in base:
            for label, hostile in HOSTILE_TEXT.items():
                before = rows()
                answer = alice.call(tool, arguments_with(base, name, hostile))
                calls += 1
                error = error_text(answer)
                if error is None:
                    continue
                refused.append((tool, label, error))
                if (
                    error.rstrip(": ") == f"Error executing tool {tool}"
                    or "Traceback" in error
                    or "internal error" in error.lower()
                    or "failed inside the server" in error
                ):
                    unclean.append((tool, name, label, error[:200]))
                if rows() != before:
                    written.append((tool, name, label, error[:200]))
        for read, args in (
            ("list_tasks", "{}"),
            ("get_task", '{"task_id": 1}'),
            ("get_board", "{}"),
            ("get_messages", '{"box": "pool"}'),
            ("get_messages", "{}"),
        ):
            if (error := error_text(bob.call(read, args))) is not None:
                broken.append((tool, read, error[:200]))
    assert calls > 500 and len(refused) > calls / 2
    assert not [r for r in refused if "Unknown tool" in r[2] or "not found" in r[2].lower()[:40]], "a tool is missing"
    said = {
        "lone surrogate": "lone UTF-16 surrogate",
        "NUL": "NUL character",
        "oversized string": "at most",
        "many items": "at most",
        "deep object": "nested deeper",
    }
    for label, words in said.items():  # each refusal says what was wrong
        vague = [r for r in refused if r[1] == label and words not in r[2] and "Input should" not in r[2]]
        assert not vague, vague[:3]
    assert unclean == [], unclean
    assert written == [], written
    assert broken == [], broken
