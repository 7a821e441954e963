"""A fake OpenAI-compatible chat server on 127.0.0.1, scripted per critic lens.

The real `openai` client talks to it over HTTP, so the LLM critic's whole code path runs. Each
request is routed by the lens named in its system prompt ("You are the <lens> critic"), or
"synthesis" for the synthesiser, or "digest" for the digest writer. A script entry is a critique dict (sent as JSON), a raw string
(sent as is: malformed output), or a callable(request) returning either. `delay` sleeps per lens.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LENS = re.compile(r"You are the (\S+) critic")


def critique(
    verdict: str = "PASS",
    score: int = 9,
    summary: str = "looks fine",
    issues: list | None = None,
    resolutions: list | None = None,
) -> dict:
    return {
        "verdict": verdict,
        "score": score,
        "summary": summary,
        "issues": issues or [],
        "resolutions": resolutions or [],
    }


def issue(
    severity: str = "major",
    category: str = "bug",
    location: str = "app.py:1",
    description: str = "wrong",
    suggestion: str = "fix it",
) -> dict:
    return {
        "severity": severity,
        "category": category,
        "location": location,
        "description": description,
        "suggestion": suggestion,
    }


class FakeLLM:
    def __init__(self):
        self.scripts: dict[str, deque] = defaultdict(deque)
        self.default: dict[str, object] = {}
        self.delay: dict[str, float] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
                found = LENS.search(system)
                lens = (
                    found.group(1)
                    if found
                    else (
                        "synthesis" if "consolidate" in system else "digest" if "digest of lessons" in system else "?"
                    )
                )
                with fake.lock:
                    fake.requests.append({"lens": lens, "model": body["model"], "body": body, "at": time.time()})
                    entry = (
                        fake.scripts[lens].popleft()
                        if fake.scripts[lens]
                        else fake.default.get(lens, fake.default.get("*", critique()))
                    )
                time.sleep(fake.delay.get(lens, fake.delay.get("*", 0)))
                if callable(entry):
                    entry = entry(body)
                content = entry if isinstance(entry, str) else json.dumps(entry)
                payload = json.dumps(
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                    }
                ).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # shutdown() returns at serve_forever's next poll: a short one, so no test waits half a second at teardown
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, lens: str, *entries) -> None:
        with self.lock:
            self.scripts[lens].extend(entries)

    def calls(self, lens: str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if lens is None or r["lens"] == lens]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
