"""Memory as it really runs: servers in their own processes, a Chroma server, and no network at all."""

from __future__ import annotations

import os
import textwrap

import pytest
from conftest import call, clean_env, run_cli, stdio_server, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LESSON = dict(
    problem="Retries hammered the API in lockstep after an outage.",
    fix="Back off exponentially with random jitter between attempts.",
    task_type="code",
)

GUARD = textwrap.dedent('''
    """Test guard: refuse and record every connection or name lookup that leaves this machine."""
    import os
    import socket

    _log_path = os.environ["HB_NET_LOG"]
    _connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo


    def _local(host):
        return host is None or str(host) in ("localhost", "::1", "") or str(host).startswith("127.")


    def _refuse(what):
        with open(_log_path, "a") as f:
            f.write(what + "\\n")
        raise OSError(101, "network is unreachable (hiveboard test guard)")


    def connect(self, address):
        if isinstance(address, tuple) and not _local(address[0]):
            _refuse(f"connect {address}")
        return _connect(self, address)


    def connect_ex(self, address):
        if isinstance(address, tuple) and not _local(address[0]):
            _refuse(f"connect {address}")
        return _connect_ex(self, address)


    def getaddrinfo(host, *args, **kwargs):
        if not _local(host):
            _refuse(f"resolve {host}")
        return _getaddrinfo(host, *args, **kwargs)


    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
''')


async def vector_ids(client, query: str) -> list[int]:
    return [h["id"] for h in (await call(client, "query_memory", query=query, mode="vector"))["hits"]]


async def test_nothing_is_downloaded_the_model_runs_offline(tmp_path):
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    log = tmp_path / "net.log"
    env = clean_env(
        HIVEBOARD_AGENT="offline-agent",
        HB_NET_LOG=str(log),
        PYTHONPATH=os.pathsep.join([str(guard_dir), os.environ.get("PYTHONPATH", "")]),
    )
    # a lead's lessons are handed at claims (an agent's unreviewed ones are found by search only)
    added = run_cli(
        "--home", str(tmp_path / "home"), "agent", "add", "offline-agent", "--role", "lead", env=clean_env()
    )
    assert added.returncode == 0, added.stderr
    async with stdio_server(tmp_path / "home", "offline-agent", env=env, offline=True) as c:
        lesson = await call(c, "record_lesson", **LESSON)
        found = await until(
            lambda: vector_ids(c, "thundering herd of clients reconnecting"), what="indexing", interval=0.1
        )
        assert found[0] == lesson["item"]["id"]
        card = await call(c, "create_task", title="Add retries to the HTTP client", task_type="code")
        claim = await call(c, "claim_task")
        assert [h["id"] for h in claim["lessons"]] == [lesson["item"]["id"]]
        await call(
            c,
            "complete_task",
            task_id=card["id"],
            token=claim["token"],
            output="retries with jitter",
            helpful_lessons=[lesson["item"]["id"]],
        )
    assert not log.exists() or log.read_text() == "", f"network use attempted:\n{log.read_text()}"


async def test_two_windows_share_fresh_memory_and_the_owner_can_leave(tmp_path):
    home = tmp_path / "home"
    async with stdio_server(home, "window-b") as b:
        async with stdio_server(home, "window-a") as a:
            await call(a, "whoami")
            from_a = await call(a, "record_lesson", **LESSON)
            # b asks by meaning; whichever process owns the index answers, and sees a's fresh lesson
            await until(
                lambda: _contains(vector_ids(b, "clients retrying all at the same moment"), from_a["item"]["id"]),
                what="b seeing a's lesson",
                interval=0.1,
            )
            from_b = await call(
                b,
                "record_lesson",
                problem="Docs said the default port was 8000.",
                fix="Read defaults from the settings class when building docs.",
                task_type="docs",
            )
            await until(
                lambda: _contains(vector_ids(a, "documentation stating the wrong default"), from_b["item"]["id"]),
                what="a seeing b's lesson",
                interval=0.1,
            )
        # a has exited; b still finds both by meaning (taking the index over if a owned it)
        assert await _contains(vector_ids(b, "clients retrying all at the same moment"), from_a["item"]["id"])
        later = await call(
            b,
            "record_lesson",
            problem="A cron job ran twice after a DST change.",
            fix="Schedule in UTC.",
            task_type="ops",
        )
        await until(
            lambda: _contains(vector_ids(b, "timezone change caused a job to run twice"), later["item"]["id"]),
            what="indexing after the owner left",
            interval=0.1,
        )


async def _contains(ids_coroutine, item_id: int) -> bool:
    return item_id in await ids_coroutine


async def test_a_server_started_on_a_chroma_server_uses_it(tmp_path, chroma_server):
    env = clean_env(
        HIVEBOARD_AGENT="team-a", HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_CHROMA_COLLECTION="team_a_memory"
    )
    async with stdio_server(tmp_path / "home", "team-a", env=env) as c:
        lesson = await call(c, "record_lesson", **LESSON)
        await until(
            lambda: _contains(vector_ids(c, "clients retrying all at the same moment"), lesson["item"]["id"]),
            what="indexing on the Chroma server",
            interval=0.1,
        )
    assert not (tmp_path / "home" / "chroma").exists()  # nothing embedded was opened
