"""A request the HTTP entry refuses, as an MCP client meets it: the reason in the answer a client shows, the
challenge the MCP authorization spec asks for, and the server's description at the well-known address."""

from __future__ import annotations

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hiveboard.server.cli import http_app
from hiveboard.server.config import load_settings
from hiveboard.server.stores import open_board

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def site(tmp_path):
    settings = load_settings(home=tmp_path)
    board = open_board(settings)
    yield http_app(settings, board)
    board.store.close()


def http(site, token: str | None = None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=site), base_url=BASE, headers=headers)


def innermost(error: BaseException) -> BaseException:
    """The error a task group wraps (the client's connection runs in one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def test_an_mcp_client_with_a_wrong_token_is_told_why(site):
    with pytest.raises(BaseException) as refused:
        async with Client(streamable_http_client(f"{BASE}/mcp", http_client=http(site, "hb_forged"))):
            pass
    said = str(innermost(refused.value))
    assert said.startswith("unauthorized: the bearer token matches no agent") and "hiveboard agent token NAME" in said


async def test_a_refusal_carries_the_challenge_the_authorization_spec_asks_for(site):
    metadata = f'resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
    async with http(site, "hb_forged") as client:
        r = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="hiveboard", ') and metadata in challenge
    assert 'error="invalid_token", error_description="the bearer token matches no agent' in challenge
    async with http(site) as client:
        r = await client.post("/mcp", json={}, headers={"Authorization": "Basic cm9vdDpyb290"})
    assert 'error="invalid_request"' in r.headers["www-authenticate"]


async def test_the_well_known_description_says_where_tokens_come_from(site):
    async with http(site) as client:
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            r = await client.get(path)
            assert r.status_code == 200, (path, r.text)
            described = r.json()
            assert described["resource"] == f"{BASE}/mcp" and described["bearer_methods_supported"] == ["header"]
            assert "authorization_servers" not in described  # none: no client should start an OAuth flow
            assert "hiveboard agent add NAME" in described["token_source"]
