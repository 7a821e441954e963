"""Several hiveboard nodes on one PostgreSQL: the CLI on a postgresql:// URL (its password never shown),
URLs of other databases refused, and two server processes with separate homes sharing one board, a
claim, and a wake-up."""

from __future__ import annotations

import anyio
import pytest
from conftest import call, call_error, clean_env, run_cli, stdio_server

pytestmark = pytest.mark.anyio


def with_password(url: str) -> str:
    """The URL with a password in it (the test cluster trusts loopback, so any password connects)."""
    return url.replace("postgresql://postgres@", "postgresql://postgres:pa55-w0rd@", 1)


def cli(home, url, *args):
    return run_cli("--home", str(home), *args, env=clean_env(HIVEBOARD_DB=url))


def test_the_cli_runs_on_a_postgresql_url_and_never_shows_its_password(postgres, tmp_path):
    url = with_password(postgres.database())
    added = cli(tmp_path / "home", url, "agent", "add", "lee", "--role", "lead")
    assert added.returncode == 0, added.stderr
    shown = cli(tmp_path / "home", url, "board")
    assert shown.returncode == 0 and "0 cards" in shown.stdout, shown.stderr
    listed = cli(tmp_path / "home", url, "agent", "list")
    assert "lee" in listed.stdout
    doctor = cli(tmp_path / "home", url, "doctor")
    assert "database: postgresql://postgres:***@" in doctor.stdout and "(reachable; schema current)" in doctor.stdout
    for done in (added, shown, listed, doctor):
        assert "pa55-w0rd" not in done.stdout + done.stderr
    assert not (tmp_path / "home" / "hiveboard.db").exists()  # no SQLite file beside it


def test_a_postgresql_board_without_a_shared_vector_index_does_not_start(postgres, tmp_path):
    done = cli(tmp_path / "home", with_password(postgres.database()), "serve")
    assert done.returncode == 2 and "HIVEBOARD_CHROMA_URL" in done.stderr and done.stderr.count("\n") == 1
    assert "pa55-w0rd" not in done.stderr


def test_a_url_of_another_database_or_an_unreachable_server_is_one_sentence(postgres, tmp_path):
    other = run_cli("--home", str(tmp_path / "h1"), "--db", "mysql://root@127.0.0.1/board", "board")
    assert other.returncode == 2 and "mysql://… is not supported" in other.stderr
    gone = cli(tmp_path / "h2", "postgresql://postgres:pa55-w0rd@127.0.0.1:1/nowhere", "board")
    assert gone.returncode == 2 and "cannot be used" in gone.stderr and "pa55-w0rd" not in gone.stderr
    assert gone.stderr.count("\n") == 1, gone.stderr


async def test_two_nodes_share_one_board_its_claims_and_its_wake_ups(postgres, chroma_server, tmp_path):
    url = postgres.database()

    def node(n: int, agent: str):
        env = clean_env(HIVEBOARD_DB=url, HIVEBOARD_CHROMA_URL=chroma_server, HIVEBOARD_AGENT=agent)
        env["HIVEBOARD_REVIEW__ENABLED"] = "false"
        return stdio_server(tmp_path / f"node{n}", env=env)

    async with node(1, "alice") as one, node(2, "bob") as two:
        card = await call(one, "create_task", title="made on node one")
        claim = await call(two, "claim_task")
        assert claim["claimed"] and claim["task"]["id"] == card["id"]
        assert "claimed by bob" in await call_error(one, "claim_task", task_id=card["id"])
        async with anyio.create_task_group() as tg:
            got = {}

            async def wait() -> None:
                got["inbox"] = await call(two, "get_messages", wait_seconds=30)

            tg.start_soon(wait)
            await anyio.sleep(0.5)  # bob is waiting on node two
            await call(one, "publish_message", intent="info", recipient="bob", content="hello from node one")
        assert [m["content"] for m in got["inbox"]["messages"]] == ["hello from node one"]
        done = await call(two, "complete_task", task_id=card["id"], token=claim["token"], output="did it")
        assert done["status"] == "done"
        assert (await call(one, "get_task", task_id=card["id"]))["status"] == "done"
