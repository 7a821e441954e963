"""The message pool through real MCP clients: the PRD's workflows, inboxes, read/ack state, waiting."""

from __future__ import annotations

import time

import anyio
import pytest
from conftest import call, call_error, data, fence

pytestmark = [pytest.mark.anyio, pytest.mark.backends("sqlite", "postgresql")]


async def inbox(client, **filters):
    return (await call(client, "get_messages", **filters))["messages"]


def intents(messages):
    return [(m["intent"], m["sender"]) for m in messages]


async def register(connect, *agents):
    """Register agents with roles, the way each would on its own connection."""
    for name, role in agents:
        async with connect(None) as c:
            await call(c, "whoami", name=name, role=role)


async def test_workflow_a_assignment_claim_status_help_answer_output(connect, board):
    await register(connect, ("pm", "pm"), ("eng1", "engineer"), ("eng2", "engineer"), ("research", "research"))
    async with connect("pm") as pm, connect("eng1") as eng1, connect("eng2") as eng2, connect("research") as research:
        card = await call(pm, "create_task", title="Implement feature X", description="requirements A, B, C")
        tid = card["id"]
        # the board's routine events (claimed, completed) stay in the pool; the PM follows them by subscription
        for intent in ("task_claim", "output.complete"):
            await call(pm, "subscribe", kind="intent", value=intent)
        await call(
            pm,
            "publish_message",
            intent="task_assignment",
            recipient="role:engineer",
            task_id=tid,
            content="Feature X needs to be implemented with requirements A, B, C",
        )
        for eng in (eng1, eng2):
            got = await inbox(eng)
            assert intents(got) == [("task_assignment", "pm")] and got[0]["task_id"] == tid
        claim = await call(eng1, "claim_task", task_id=tid)  # the board posts task_claim itself
        assert intents(await inbox(pm)) == [("task_claim", "eng1")]
        await call(eng1, "publish_message", intent="status_update", task_id=tid, content="50% done, stuck on API")
        ask = await call(
            eng1,
            "publish_message",
            intent="request_help",
            recipient="role:research",
            task_id=tid,
            content="Looking for the best way to optimize algorithm Y",
        )
        assert intents(await inbox(pm)) == [("status_update", "eng1")]  # the task's creator follows it
        help_req = await inbox(research)
        assert intents(help_req) == [("request_help", "eng1")]
        answer = await call(
            research, "publish_message", intent="answer", reply_to=help_req[0]["id"], content="Use a heap; O(n log k)"
        )
        # the reply reaches the question's audience (role:research) and its asker, in the task's thread
        assert answer["recipient"] == "role:research" and answer["thread"] == ask["thread"] == f"task-{tid}"
        got = await inbox(eng1)
        assert intents(got) == [("answer", "research")] and got[0]["reply_to"] == ask["id"]
        await call(
            eng1, "complete_task", task_id=tid, token=claim["token"], output="def x(): ...", summary="feature X done"
        )
        done = await inbox(pm)
        assert intents(done) == [("output.complete", "eng1")] and "feature X done" in done[0]["summary"]
        assert await inbox(eng2) == [] and await inbox(research) == []  # nothing leaked to bystanders
        log = await call(eng2, "get_messages", box="pool", task_id=tid, limit=100)
        assert [m["intent"] for m in log["messages"]] == [  # a task's log is whole, replies included
            "task_assignment",
            "task_claim",
            "status_update",
            "request_help",
            "answer",
            "output.complete",
        ]


async def test_workflow_b_test_results_update_approval(connect):
    await register(connect, ("eng1", "engineer"), ("qa", "qa"))
    async with connect("eng1") as eng1, connect("qa") as qa:
        await call(qa, "subscribe", kind="intent", value="output.complete")
        card = await call(eng1, "create_task", title="Feature X", task_type="code")
        claim = await call(eng1, "claim_task")
        await call(eng1, "complete_task", task_id=card["id"], token=claim["token"], output="code")
        seen = await inbox(qa)
        assert intents(seen) == [("output.complete", "eng1")]
        results = await call(
            qa,
            "publish_message",
            intent="test_results",
            recipient="eng1",
            task_id=card["id"],
            content="Test failed on edge case Z.",
            priority="high",
        )
        got = await inbox(eng1)
        assert intents(got) == [("test_results", "qa")] and got[0]["priority"] == "high"
        assert (await call(eng1, "get_messages", ack=[got[0]["id"]]))["acked"] == 1
        await call(
            eng1,
            "publish_message",
            intent="output.updated",
            reply_to=results["id"],
            content="Fixed edge case Z, please re-test.",
        )
        update = await inbox(qa)
        assert intents(update) == [("output.updated", "eng1")]
        await call(
            qa,
            "publish_message",
            intent="approval",
            reply_to=update[0]["id"],
            content="All tests passed. Feature X completed.",
        )
        approval = await inbox(eng1)
        assert intents(approval) == [("approval", "qa")]
        everything = await call(eng1, "get_messages", unread_only=False, limit=10)
        states = {m["intent"]: (m["read"], m["acked"]) for m in everything["messages"]}
        assert states == {"test_results": (True, True), "approval": (True, False)}


async def test_read_and_ack_state_is_per_recipient_for_one_broadcast(connect, board):
    await register(connect, ("a", None), ("b", None), ("c", None))
    async with connect("a") as a, connect("b") as b, connect("c") as c:
        sent = await call(a, "publish_message", intent="info", recipient="everyone", content="standup at 10")
        assert board.store.db.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
        assert (await call(b, "get_messages", unread_only=False))["unread"] == 1
        await inbox(b)  # b reads it
        assert (await call(c, "get_messages", unread_only=False))["messages"][0]["read"] is False
        assert (await call(b, "get_messages", unread_only=False))["messages"][0]["read"] is True
        acked = await call(c, "get_messages", ack=[sent["id"]])
        assert acked["acked"] == 1 and acked["messages"] == []
        assert await inbox(a) == []  # the sender does not get its own broadcast
        assert "not in your inbox" in await call_error(a, "get_messages", ack=[sent["id"]])
        again = await call(b, "publish_message", intent="info", recipient="everyone", content="moved to 11")
        assert "cursor is not valid" in await call_error(c, "get_messages", ack=[again["id"]], cursor="garbage!!")
        assert (await call(c, "get_messages", unread_only=False))["messages"][0]["acked"] is False  # nothing written


async def test_sender_is_the_connection_and_direct_messages_stay_private(connect):
    await register(connect, ("alice", None), ("bob", None), ("carol", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        tools = {t.name: t for t in (await alice.list_tools()).tools}
        assert "sender" not in tools["publish_message"].input_schema["properties"]
        forged = await alice.call_tool(
            "publish_message", {"intent": "info", "recipient": "bob", "content": "hi", "sender": "carol"}
        )
        assert forged.is_error or data(forged)["sender"] == "alice"
        sent = await call(alice, "publish_message", intent="info", recipient="bob", content="secret plan")
        assert sent["sender"] == "alice"
        got = await inbox(bob)
        assert {m["sender"] for m in got} == {"alice"} and got[-1]["content"] == "secret plan"
        assert await inbox(carol) == []
        pool = await call(carol, "get_messages", box="pool", sender="alice")
        assert pool["messages"] == []


async def test_subscriptions_by_task_and_channel(connect):
    await register(connect, ("lead", None), ("watcher", None), ("eng", None))
    async with connect("lead") as lead, connect("watcher") as watcher, connect("eng") as eng:
        card = await call(lead, "create_task", title="t")
        subs = await call(watcher, "subscribe", kind="task", value=str(card["id"]))
        assert subs["subscriptions"][0]["kind"] == "task"
        await call(watcher, "subscribe", kind="channel", value="api-design")
        await call(eng, "claim_task")
        await call(eng, "publish_message", intent="proposal", thread="api-design", content="REST, not gRPC")
        await call(eng, "publish_message", intent="info", thread="random", content="lunch?")
        got = await inbox(watcher)
        assert intents(got) == [("task_claim", "eng"), ("proposal", "eng")]
        await call(watcher, "subscribe", kind="channel", value="api-design", unsubscribe=True)
        await call(eng, "publish_message", intent="proposal.feedback", thread="api-design", content="ok")
        assert await inbox(watcher) == []
        assert "not subscribed" in await call_error(
            watcher, "subscribe", kind="channel", value="api-design", unsubscribe=True
        )


async def test_filters_previews_and_cursor(connect):
    await register(connect, ("a", None), ("b", None))
    async with connect("a") as a, connect("b") as b:
        card = await call(a, "create_task", title="t")
        for i in range(45):
            await call(
                a,
                "publish_message",
                intent="status_update" if i % 3 else "question",
                recipient="b",
                task_id=card["id"] if i % 2 else None,
                content=f"message {i} " + "x" * 400,
            )
        page = await call(b, "get_messages", unread_only=False, limit=20)
        assert page["unread"] == 45 and len(page["messages"]) == 20
        assert page["messages"][0]["content"].endswith("full=true for all)")
        assert "summary" not in page["messages"][0]  # it would only repeat the preview's start
        seen, cursor = [], None
        while True:
            page = await call(b, "get_messages", unread_only=False, limit=20, **({"cursor": cursor} if cursor else {}))
            seen += [m["id"] for m in page["messages"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        assert len(seen) == len(set(seen)) == 45
        questions = await call(b, "get_messages", intent="question", full=True, limit=100)
        assert len(questions["messages"]) == 15 and len(questions["messages"][0]["content"]) > 400
        about_task = await call(b, "get_messages", task_id=card["id"], limit=100)
        # the 22 odd-numbered messages are about the task; 7 of them were questions, already read above
        assert len(about_task["messages"]) == 22 - 7
        future = await call(b, "get_messages", unread_only=False, since="2999-01-01T00:00:00Z")
        assert future["messages"] == []
        await call(
            a,
            "publish_message",
            intent="handoff",
            recipient="b",
            summary="parser done",
            content="The parser handles nested lists now.",
        )
        [told] = (await call(b, "get_messages", intent="handoff"))["messages"]
        assert told["summary"] == "parser done" and told["content"] == "The parser handles nested lists now."


async def test_browsing_pages_through_unread_then_read_ones_sees_each_once_in_order(connect):
    """unread_only=False pages through the unread messages (oldest first), then the read ones (newest first),
    whatever page the turn from one to the other falls on; browsing marks nothing read."""
    await register(connect, ("a", None), ("b", None))
    async with connect("a") as a, connect("b") as b:
        ids = [
            (await call(a, "publish_message", intent="status_update", recipient="b", content=f"note {i}"))["id"]
            for i in range(13)
        ]
        read = [m["id"] for m in (await call(b, "get_messages", limit=6))["messages"]]  # the six oldest, marked read
        assert read == ids[:6]
        for limit in (1, 4, 5, 7, 20):
            seen, cursor = [], None
            while True:
                args = {"cursor": cursor} if cursor else {}
                page = await call(b, "get_messages", unread_only=False, limit=limit, **args)
                assert page["unread"] == 7
                seen += [(m["id"], m["read"]) for m in page["messages"]]
                cursor = page.get("next_cursor")
                if not cursor:
                    break
            assert seen == [(i, False) for i in ids[6:]] + [(i, True) for i in reversed(ids[:6])], limit


async def test_full_pages_are_bounded_and_say_how_to_get_the_rest(connect):
    await register(connect, ("a", None), ("b", None))
    async with connect("a") as a, connect("b") as b:
        for i in range(5):
            await call(a, "publish_message", intent="info", recipient="b", content=f"long {i} " + "y" * 45_000)
        await call(a, "publish_message", intent="info", content="to the pool " + "p" * 60_000)
        await call(a, "publish_message", intent="info", content="to the pool too " + "q" * 60_000)
        got, pages = [], 0
        while True:  # full=true pages hold two of these (100,000 characters at most), the rest stays unread
            page = await call(b, "get_messages", full=True, limit=10)
            if not page["messages"]:
                break
            pages += 1
            got += page["messages"]
            assert sum(len(m["content"]) for m in page["messages"]) <= 100_000
            if len(got) < 5:
                assert "cursor=next_cursor for the rest" in page["hint"] and page["next_cursor"], page
        assert pages == 3 and [m["content"][:6] for m in got] == [f"long {i}" for i in range(5)]
        assert all(len(m["content"]) == m["content_chars"] for m in got)  # whole, not previews
        first = await call(b, "get_messages", box="pool", full=True, limit=10)
        assert len(first["messages"]) == 1 and first["hint"]
        rest = await call(b, "get_messages", box="pool", full=True, limit=10, cursor=first["next_cursor"])
        assert rest["messages"][0]["content"].startswith("to the pool too") and "hint" not in rest
        one = await call(b, "get_messages", unread_only=False, full=True, limit=1)  # one message always fits
        assert len(one["messages"]) == 1


async def test_bad_messages_are_refused_and_nothing_is_written(connect, board):
    await register(connect, ("a", "coder"), ("b", None))
    async with connect("a") as a:
        before = board.store.db.execute(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM inbox)"
        ).fetchone()
        cases = [
            (dict(intent="info", recipient="nobody", content="x"), "not a registered agent"),
            (dict(intent="info", recipient="role:astronaut", content="x"), "no agent has role 'astronaut'"),
            (dict(intent="Not An Intent", content="x"), "intent"),
            (dict(intent="info", content="x" * 64_001), "limit is 64000"),
            (dict(intent="info", content=""), "needs content"),
            (dict(intent="info", content="x", task_id=999), "task 999 does not exist"),
            (dict(intent="info", content="x", reply_to=999), "message 999"),
            (dict(intent="info", content="x", thread="has spaces"), "thread"),
            (dict(intent="info", content="x", priority="asap"), "priority"),
            (dict(intent="info", content="x", metadata={"k": "v" * 9000}), "metadata"),
        ]
        for args, expected in cases:
            assert expected in await call_error(a, "publish_message", **args)
        for args, expected in [
            (dict(since="yesterday"), "ISO 8601"),
            (dict(cursor="@@"), "cursor"),
            (dict(limit=0), "limit"),
        ]:
            assert expected in await call_error(a, "get_messages", **args)
        assert "task" in await call_error(a, "subscribe", kind="task", value="abc")
        after = board.store.db.execute(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM inbox)"
        ).fetchone()
        assert after == before


async def test_waiting_get_messages_wakes_on_publish(connect):
    await register(connect, ("waiter", None), ("sender", None))
    async with connect("waiter") as waiter, connect("sender") as sender:
        assert (await call(waiter, "get_messages", wait_seconds=0.3))["messages"] == []  # times out empty
        woke_after: list[float] = []

        async def wait():
            started = time.monotonic()
            page = await call(waiter, "get_messages", wait_seconds=30)
            woke_after.append(time.monotonic() - started)
            assert intents(page["messages"]) == [("info", "sender")]

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await fence(waiter)  # the server has read the waiting call
            sent_at = time.monotonic()
            await call(sender, "publish_message", intent="info", recipient="waiter", content="wake up")
            published = time.monotonic()
        # woke long before the 30 s timeout, right after the publish
        assert woke_after and woke_after[0] < 10
        assert published - sent_at < 10


async def test_inbox_resource_is_private_and_notifies_listeners(connect):
    await register(connect, ("reader", None), ("other", None))
    async with connect("reader") as reader, connect("other") as other:
        await call(other, "publish_message", intent="info", recipient="reader", content="hello")
        res = await reader.read_resource("hiveboard://inbox/reader")
        assert '"hello"' in res.contents[0].text
        with pytest.raises(Exception, match="only your own inbox"):
            await other.read_resource("hiveboard://inbox/reader")


async def test_inbox_listeners_are_told_when_a_message_lands(connect):
    await register(connect, ("reader", None), ("other", None))
    async with connect("reader") as reader, connect("other") as other:
        async with reader.listen(resource_subscriptions=["hiveboard://inbox/reader"]) as sub:
            await call(other, "publish_message", intent="info", recipient="reader", content="ping")
            with anyio.fail_after(10):
                event = await sub.__anext__()
        assert event.uri == "hiveboard://inbox/reader"
        assert intents(await inbox(reader)) == [("info", "other")]


async def test_nobody_listens_on_another_agents_inbox(connect):
    await register(connect, ("reader", None), ("other", None))
    async with connect("reader") as reader, connect("other") as other:
        with pytest.raises(Exception, match="only to your own inbox"):
            async with other.listen(resource_subscriptions=["hiveboard://inbox/reader"]) as sub:
                await call(reader, "publish_message", intent="info", recipient="reader", content="x")
                with anyio.fail_after(5):
                    await sub.__anext__()
        async with reader.listen(resource_subscriptions=["hiveboard://inbox/reader"]) as sub:  # its own: fine
            await call(other, "publish_message", intent="info", recipient="reader", content="ping")
            with anyio.fail_after(10):
                assert (await sub.__anext__()).uri == "hiveboard://inbox/reader"


async def test_subscribers_never_see_direct_messages(connect):
    await register(connect, ("alice", None), ("bob", None), ("carol", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        card = await call(alice, "create_task", title="t")
        await call(carol, "subscribe", kind="intent", value="info")
        await call(carol, "subscribe", kind="task", value=f"0{card['id']}")  # canonicalised to the id
        await call(alice, "publish_message", intent="info", recipient="bob", task_id=card["id"], content="secret")
        assert await inbox(carol) == []
        assert [m["content"] for m in await inbox(bob)] == ["secret"]
        await call(alice, "publish_message", intent="info", task_id=card["id"], content="for the pool")
        assert [m["content"] for m in await inbox(carol)] == ["for the pool"]


async def test_a_message_naming_a_card_that_does_not_exist_is_refused_and_nothing_is_written(connect):
    await register(connect, ("alice", None), ("bob", None), ("carol", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        card = await call(alice, "create_task", title="t")
        await call(carol, "subscribe", kind="intent", value="info")
        missing = card["id"] + 1000
        for to in ({}, {"recipient": "bob"}, {"recipient": "everyone"}):
            refused = await call_error(alice, "publish_message", intent="info", task_id=missing, content="x", **to)
            assert refused == (
                f"publish_message: task {missing} does not exist; omit task_id or use an id from list_tasks"
            )
        assert await inbox(bob) == [] and await inbox(carol) == []
        # naming the card that does exist, the same messages reach them, and the pool's reaches its creator too
        for to in ({}, {"recipient": "bob"}):
            await call(bob, "publish_message", intent="info", task_id=card["id"], content=f"ok {to}", **to)
        assert [m["content"] for m in await inbox(alice)] == ["ok {}"]
        assert [m["content"] for m in await inbox(carol)] == ["ok {}"]


async def test_only_the_cards_people_unblock_it_and_the_holder_hears(connect):
    await register(connect, ("alice", None), ("bob", None), ("carol", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        card = await call(alice, "create_task", title="t")
        claim = await call(bob, "claim_task")
        await call(bob, "update_task", task_id=card["id"], token=claim["token"], status="blocked", reason="keys")
        await inbox(bob)
        # a bystander cannot take the card out of blocked (and then claim it); its creator can
        refused = await call_error(carol, "update_task", task_id=card["id"], status="todo", reason="mine now")
        assert "only its holder (bob), its creator (alice)" in refused
        assert (await call(carol, "get_task", task_id=card["id"]))["status"] == "blocked"
        await call(alice, "update_task", task_id=card["id"], status="todo", reason="keys arrived")
        told = await inbox(bob)
        assert [m["intent"] for m in told] == ["status_update"] and "keys arrived" in told[0]["summary"]


async def test_session_protocol_clients_subscribe_to_their_inbox(connect):
    import mcp_types

    await register(connect, ("reader", None), ("other", None))
    updates: list[str] = []

    async def on_message(message):
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    async with connect("reader", mode="legacy", message_handler=on_message) as reader, connect("other") as other:
        await reader.subscribe_resource("hiveboard://inbox/reader")
        with pytest.raises(Exception, match="only to your own inbox"):
            await reader.subscribe_resource("hiveboard://inbox/other")
        await call(other, "publish_message", intent="info", recipient="reader", content="ping")
        with anyio.fail_after(10):
            while not updates:
                await anyio.sleep(0.01)
    assert updates == ["hiveboard://inbox/reader"]


async def test_eight_readers_of_one_inbox_never_get_the_same_message(connect, board):
    await register(connect, ("sender", None), ("reader", None))
    async with connect("sender") as sender:
        for n in range(400):
            await call(sender, "publish_message", intent="info", recipient="reader", content=f"m{n}")
    seen: list[int] = []

    async def drain():
        async with connect("reader") as reader:
            while True:
                got = (await call(reader, "get_messages", limit=7))["messages"]
                if not got:
                    return
                seen.extend(m["id"] for m in got)

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(drain)
    assert len(seen) == 400 and len(set(seen)) == 400


async def test_direct_messages_never_show_in_the_pool_even_a_tasks_log(connect):
    await register(connect, ("alice", None), ("bob", None), ("carol", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol:
        card = await call(alice, "create_task", title="shared work")
        await call(alice, "publish_message", intent="info", recipient="bob", task_id=card["id"], content="private")
        await call(alice, "publish_message", intent="info", task_id=card["id"], content="for everyone on it")
        log = await call(carol, "get_messages", box="pool", task_id=card["id"], limit=100)
        contents = [m["content"] for m in log["messages"]]
        assert "for everyone on it" in contents and "private" not in contents
        assert [m["content"] for m in await inbox(bob)] == ["private"]


async def test_a_reply_reaches_the_threads_audience_unless_it_names_a_recipient(connect):
    """alice asks on the task's thread; bob follows the task; carol answers; dave's DM stays private."""
    await register(connect, ("alice", None), ("bob", None), ("carol", None), ("dave", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("carol") as carol, connect("dave") as dave:
        card = await call(alice, "create_task", title="pick a queue")
        await call(bob, "subscribe", kind="task", value=str(card["id"]))
        await call(carol, "subscribe", kind="task", value=str(card["id"]))
        question = await call(
            alice,
            "publish_message",
            intent="question",
            task_id=card["id"],
            content="Redis or Postgres for the job queue?",
        )
        assert [m["id"] for m in await inbox(bob)] == [question["id"]]
        await inbox(carol)
        answer = await call(
            carol,
            "publish_message",
            intent="answer",
            reply_to=question["id"],
            content="Postgres: SKIP LOCKED, one less service",
        )
        assert answer.get("recipient") is None and answer["thread"] == question["thread"]
        assert [m["id"] for m in await inbox(alice)] == [answer["id"]]
        assert [m["id"] for m in await inbox(bob)] == [answer["id"]]  # the task's follower keeps up
        aside = await call(
            bob,
            "publish_message",
            intent="info",
            reply_to=answer["id"],
            recipient="carol",
            content="agreed, off the record",
        )
        assert aside["recipient"] == "carol" and await inbox(alice) == []
        assert [m["id"] for m in await inbox(carol)] == [aside["id"]]
        dm = await call(dave, "publish_message", intent="info", recipient="alice", content="lunch?")
        reply = await call(alice, "publish_message", intent="info", reply_to=dm["id"], content="yes")
        assert reply["recipient"] == "dave" and await inbox(bob) == [] and await inbox(carol) == []


async def test_operator_roles_are_granted_not_taken(connect, board):
    async with connect(None) as c:
        assert "granted by the operator" in await call_error(c, "whoami", name="mallory", role="lead")
    assert board.agents.get("mallory", missing_ok=True) is None  # nothing was written
    board.agents.new_token("olive", "lead")  # the operator: hiveboard agent add olive --role lead
    await register(connect, ("alice", None), ("bob", None))
    async with connect("alice") as alice, connect("bob") as bob, connect("olive") as olive:
        card = await call(alice, "create_task", title="t")
        claim = await call(bob, "claim_task", task_id=card["id"])
        await call(
            bob, "update_task", task_id=card["id"], token=claim["token"], status="needs_human", reason="which schema?"
        )
        moved = await call(olive, "update_task", task_id=card["id"], status="todo", reason="use v2")
        assert moved["status"] == "todo"


async def test_polling_an_inbox_with_nothing_unread_needs_no_write_lock(connect, board):
    """A poll (get_messages, unread first, marking them read) of an inbox with nothing unread is answered from a
    read: with the board's write lock held elsewhere (another process, another node) it answers at once; with
    unread messages it marks them read as before, once the lock is free."""
    import sqlite3

    await register(connect, ("a", None), ("b", None))
    async with connect("a") as a, connect("b") as b:
        await call(a, "publish_message", intent="status_update", recipient="b", content="first")
        assert [m["content"] for m in (await call(b, "get_messages"))["messages"]] == ["first"]
        if board.store.dialect.name == "sqlite":
            holder = sqlite3.connect(board.store.path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
        else:
            import psycopg

            from hiveboard.board.scopes import BOARD_LOCK

            holder = psycopg.connect(board.store.path, autocommit=True)
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [BOARD_LOCK])  # held alone: no write goes
        try:
            with anyio.fail_after(5):  # the lock is held for longer than this
                for _ in range(3):
                    page = await call(b, "get_messages")
                    assert (page["messages"], page["unread"]) == ([], 0)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await call(a, "publish_message", intent="status_update", recipient="b", content="second")
        page = await call(b, "get_messages")
        assert [m["content"] for m in page["messages"]] == ["second"] and page["unread"] == 1
        assert (await call(b, "get_messages"))["unread"] == 0  # marked read


async def test_a_verdict_reaches_its_holders_inbox_whole_within_a_bound(connect, board):
    from hiveboard.board.messages import VERDICT_CHARS

    await register(connect, ("lead", None), ("coder", None))
    async with connect("lead") as lead, connect("coder") as coder:
        card = await call(lead, "create_task", title="slugify")
        await call(coder, "claim_task", task_id=card["id"])
        brief = "FAIL: round 1 of 3. Fix these first, in order:\n" + "\n".join(
            f"{n}. the slug of case {n} keeps its trailing dash; strip it" for n in range(1, 15)
        )
        assert 300 < len(brief) < VERDICT_CHARS
        with board.store.write() as db:
            board.messages.event(db, "review", "critique", card["id"], brief.split("\n")[0], brief)
            board.messages.event(db, "review", "critique", card["id"], "FAIL: long", "z" * (VERDICT_CHARS + 1))
        await call(lead, "publish_message", intent="critique", recipient="coder", content="mine " + "w" * 400)
        got = await inbox(coder, intent="critique")
        assert got[0]["content"] == brief  # whole: the brief is what the holder acts on
        assert len(got[1]["content"]) < VERDICT_CHARS + 60 and got[1]["content"].endswith("full=true for all)")
        assert got[2]["content"].endswith("full=true for all)")  # an agent's message is a preview, as ever
