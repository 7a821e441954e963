"""What the model is shown: tools/list within its token budget, compacted schemas that still refuse
what the server refuses, and each result's data sent once."""

from __future__ import annotations

import json

import jsonschema
import pytest
from conftest import call
from mcp import Client

from hiveboard.server.app import build_server
from hiveboard.server.boundary import MAX_ID, TOOLS_BUDGET, tool_token_costs
from hiveboard.server.identity import Identity

pytestmark = pytest.mark.anyio

# (tool, arguments the server refuses); each breaks one bound, enum, length or required argument
BAD = [
    ("get_board", {"top": 51}),
    ("get_board", {"top": -1}),
    ("create_task", {"title": ""}),
    ("create_task", {"title": "t", "priority": "urgent"}),
    ("create_task", {"title": "t", "depends_on": [0]}),
    ("create_task", {"title": "t", "acceptance_tests": {"files": [{"name": "", "content": "x"}]}}),
    ("create_task", {"description": "no title"}),
    ("list_tasks", {"status": "doing"}),
    ("list_tasks", {"limit": 0}),
    ("get_task", {"task_id": 0}),
    ("claim_task", {"task_id": 0}),
    ("update_task", {"task_id": 1, "status": "done"}),
    ("complete_task", {"task_id": 1, "token": -1, "output": "x"}),
    ("complete_task", {"task_id": 1, "token": 1, "output": "x", "artifacts": [{"name": "a", "kind": "pdf"}]}),
    ("complete_task", {"task_id": 1, "token": 1, "output": "x", "helpful_lessons": list(range(1, 52))}),
    ("get_messages", {"limit": 101}),
    ("get_messages", {"wait_seconds": 301}),
    ("get_messages", {"box": "outbox"}),
    ("subscribe", {"kind": "agent", "value": "bob"}),
    ("submit_critique", {"review_id": 1, "lens": "security", "verdict": "PASS", "score": 11, "summary": "ok"}),
    (
        "submit_critique",
        {
            "review_id": 1,
            "lens": "security",
            "verdict": "PASS",
            "score": 9,
            "summary": "ok",
            "issues": [{"severity": "blocker", "category": "c", "description": "d"}],
        },
    ),
    ("query_memory", {"query": "q", "k": 51}),
    ("query_memory", {"query": "q", "wait_seconds": 61}),
    ("remember", {"items": []}),
    ("remember", {"items": [{"text": ""}]}),
    ("remember", {"items": [{"text": "t", "kind": "lesson"}]}),
    ("remember", {"items": [{"text": "t", "tags": ["t"] * 21}]}),
    ("remember", {"items": [{"text": "t"}] * 51}),
    ("query_memory", {"query": "q", "tags": ["t"] * 21}),
    ("record_lesson", {"problem": "p", "fix": "f", "task_type": "code", "supersedes": 0}),
]


async def test_tools_list_fits_the_budget_and_carries_no_output_schemas(connect, with_memory):
    async with connect("alice", memory=with_memory) as c:
        tools = (await c.list_tools()).tools
    assert len(tools) == 22
    assert all(t.output_schema is None for t in tools)
    total = sum(cost + output for _, cost, output in tool_token_costs(tools))
    assert total <= TOOLS_BUDGET, f"tools/list is ~{total} tokens, over the {TOOLS_BUDGET} budget"
    for tool in tools:
        assert not set(keywords(tool.input_schema)) & {"title", "$ref", "$defs"}, tool.name


def keywords(schema: dict):
    """Every keyword used in a JSON schema, at any depth (property names are not keywords)."""
    for key, value in schema.items():
        yield key
        subs = value.values() if key in ("properties", "$defs") else value if key == "anyOf" else [value]
        for sub in subs:
            if isinstance(sub, dict):
                yield from keywords(sub)


async def test_advertised_schemas_refuse_what_the_server_refuses(connect, with_memory):
    async with connect("alice", memory=with_memory) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for tool, args in BAD:
            schema = tools[tool].input_schema
            assert not jsonschema.Draft202012Validator(schema).is_valid(args), f"{tool} advertises {args} as valid"
            result = await c.call_tool(tool, args)
            assert result.is_error, f"{tool}({args}) was accepted"
        # and what it advertises as valid, it takes
        card = await call(
            c,
            "create_task",
            title="t",
            priority="high",
            depends_on=[],
            acceptance_tests={"files": [{"name": "test_a.py", "content": "def test_a(): pass"}], "hidden": True},
        )
        assert jsonschema.Draft202012Validator(tools["get_task"].input_schema).is_valid({"task_id": card["id"]})
        assert (await call(c, "get_task", task_id=card["id"]))["id"] == card["id"]


async def test_ids_past_what_json_carries_exactly_are_refused_though_the_bound_is_not_advertised(connect):
    async with connect("alice") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["claim_task"].input_schema["properties"]["task_id"] == {
            "minimum": 1,
            "type": "integer",
            "description": "omit: the next ready card",
        }
        for tool, args in (
            ("claim_task", {"task_id": MAX_ID + 1}),
            ("create_task", {"title": "t", "depends_on": [MAX_ID + 1]}),
        ):
            result = await c.call_tool(tool, args)
            assert result.is_error and "less than or equal to 9007199254740991" in result.content[0].text, result


async def test_strings_past_their_length_are_refused_naming_the_bound_though_it_is_not_advertised(connect):
    async with connect("alice") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "maxLength" not in json.dumps([t.input_schema for t in tools.values()])
        for tool, args, said in (
            ("create_task", {"title": "x" * 201}, "argument 'title': String should have at most 200 characters"),
            ("publish_message", {"intent": "x" * 41, "content": "c"}, "'intent': String should have at most 40"),
            ("get_messages", {"sender": "x" * 65}, "argument 'sender': String should have at most 64 characters"),
        ):
            result = await c.call_tool(tool, args)
            assert result.is_error and said in result.content[0].text, result
            assert result.content[0].text.endswith("nothing was done"), result
        assert (await call(c, "get_board"))["total"] == 0


async def test_compaction_keeps_what_the_arguments_model_requires(board):
    server = build_server(board, Identity(board.agents, "memory", agent="alice"))
    advertised = {t.name: t.input_schema for t in await server.list_tools()}
    full = {t.name: t.input_schema for t in await super(type(server), server).list_tools()}
    for name, schema in full.items():
        assert advertised[name].get("required", []) == schema.get("required", []), name
        assert list(advertised[name]["properties"]) == list(schema["properties"]), name


async def test_a_result_carries_its_data_once_as_compact_json(connect):
    async with connect("alice") as c:
        await call(c, "create_task", title="Add login", labels=["auth"])
        result = await c.call_tool("get_board", {})
    assert result.structured_content is None and len(result.content) == 1
    text = result.content[0].text
    assert json.loads(text)["total"] == 1
    assert ": " not in text and "null" not in text  # compact, nulls left out


async def test_the_full_profile_adds_typed_results(board):
    server = build_server(board, Identity(board.agents, "memory", agent="alice"), profile="full")
    async with Client(server) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["get_board"].output_schema is not None
        result = await c.call_tool("create_task", {"title": "Add login"})
    assert result.structured_content["title"] == "Add login"
    assert json.loads(result.content[0].text)["title"] == "Add login"
