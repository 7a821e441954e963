"""Cold start: what each command imports, checked in fresh interpreters (no timing here: the times
are bench/bench_startup.py's).

The terminal commands import neither the MCP SDK nor the memory's models; `serve` answers
`initialize` before it imports Chroma, onnxruntime, tokenizers or openai, and loads the memory after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env

# what a terminal command must not load (each costs a noticeable part of a second to import)
HEAVY = {
    "chromadb",
    "onnxruntime",
    "tokenizers",
    "openai",
    "numpy",
    "mcp",
    "mcp_types",
    "uvicorn",
    "starlette",
    "httpx",
}
# what `serve` must not load before it has answered `initialize` (it needs the MCP SDK, of course)
MEMORY_AND_CRITICS = {"chromadb", "onnxruntime", "tokenizers", "openai"}

CLI = """
import json, sys
from hiveboard.server.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1].split(",")))
print("LOADED " + json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""

# `serve` on pipes in this process, and a client thread that reads sys.modules at two moments: when
# the answer to `initialize` has arrived (nothing after it has been sent yet), and when a first
# query_memory has been answered
SERVE = """
import json, os, sys, threading

watched = set(sys.argv[1].split(","))
to_server, from_client = os.pipe()
to_client, from_server = os.pipe()
os.dup2(to_server, 0)
os.dup2(from_server, 1)
seen = {}

def loaded():
    return sorted({name.split(".")[0] for name in list(sys.modules)} & watched)

def client():
    out, answers = os.fdopen(from_client, "w"), os.fdopen(to_client)
    def send(message):
        out.write(json.dumps(message) + "\\n")
        out.flush()
    def ask(n, method, params):
        send({"jsonrpc": "2.0", "id": n, "method": method, "params": params})
        while True:
            answer = json.loads(answers.readline())
            if answer.get("id") == n:
                return answer
    init = ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "test", "version": "0"}})
    seen["initialize"] = {"loaded": loaded(), "ok": "result" in init}
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    found = ask(2, "tools/call", {"name": "query_memory", "arguments": {"query": "retry a flaky test"}})
    seen["query_memory"] = {"loaded": loaded(), "ok": not found.get("result", {}).get("isError", True)}
    out.close()  # end of input: the server stops

threading.Thread(target=client, daemon=True).start()
from hiveboard.server.cli import main
code = main(sys.argv[2:])
print("SEEN " + json.dumps({"code": code, **seen}), file=sys.stderr)
"""


def run_python(script: str, watched: set[str], *args: str, home: Path) -> dict:
    env = clean_env(HIVEBOARD_HOME=str(home))
    out = subprocess.run(
        [sys.executable, "-c", script, ",".join(sorted(watched)), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    report = [line for line in out.stderr.splitlines() if line.startswith(("LOADED ", "SEEN "))]
    assert report, out.stderr
    return json.loads(report[-1].split(" ", 1)[1])


@pytest.mark.parametrize("args", [["--help"], ["agent", "add", "alice"], ["board"], ["agent", "list"]])
def test_terminal_commands_import_no_sdk_and_no_models(tmp_path, args):
    result = run_python(CLI, HEAVY, "--home", str(tmp_path), *args, home=tmp_path)
    assert result["code"] == 0
    assert result["loaded"] == []


def test_serve_answers_initialize_before_loading_the_memory_and_loads_it_after(tmp_path):
    seen = run_python(SERVE, MEMORY_AND_CRITICS, "--home", str(tmp_path), "serve", "--agent", "alice", home=tmp_path)
    assert seen["code"] == 0
    assert seen["initialize"] == {"loaded": [], "ok": True}
    assert seen["query_memory"]["ok"]
    assert {"chromadb", "onnxruntime", "tokenizers"} <= set(seen["query_memory"]["loaded"])
    assert "openai" not in seen["query_memory"]["loaded"]  # no LLM critic is configured by default
