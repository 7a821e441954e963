"""Embeddings from an OpenAI-compatible endpoint: a fake server on 127.0.0.1 driven by the real openai client."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from hiveboard.memory.embeddings import EmbeddingError, OpenAIEmbedder, get_embedder
from hiveboard.memory.index import EmbeddingMismatch, VectorIndex
from hiveboard.memory.service import open_memory

DIM = 64


def bag_of_words(text: str) -> list[float]:
    """A deterministic stand-in model: hashed word counts (shared words → similar vectors)."""
    vector = np.zeros(DIM)
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1
    return list(vector)


@pytest.fixture
def embeddings_server():
    calls: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            calls.append(body)
            if self.path != "/v1/embeddings" or body.get("model") != "fake-embed":
                self.send_error(404, "no such model")
                return
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            payload = json.dumps(
                {
                    "object": "list",
                    "model": body["model"],
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    "data": [
                        {"object": "embedding", "index": i, "embedding": bag_of_words(t)} for i, t in enumerate(inputs)
                    ],
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()  # a prompt shutdown()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", calls
    server.shutdown()
    server.server_close()


def test_memory_on_an_openai_compatible_embeddings_endpoint(board, tmp_path, embeddings_server):
    base_url, calls = embeddings_server
    embedder = OpenAIEmbedder("fake-embed", base_url=base_url)
    assert (embedder.name, embedder.dim) == ("openai:fake-embed", DIM)
    memory = open_memory(board, embedder, tmp_path, base_url=base_url)
    try:
        board.agents.ensure("alice")
        lesson = memory.record_lesson(
            "alice",
            problem="flaky payment tests hit the real API",
            fix="fake the payment API locally",
            task_type="test",
        )
        memory.record_lesson("alice", problem="README flag renamed", fix="generate docs", task_type="docs")
        memory.drain()
        assert memory.query("payment tests flaky", mode="vector").hits[0].id == lesson.item.id
        assert all(call["model"] == "fake-embed" for call in calls)
    finally:
        memory.stop()
    # the index remembers its model: the offline model may not read it
    with pytest.raises(EmbeddingMismatch, match="openai:fake-embed"):
        VectorIndex(get_embedder(), path=tmp_path / "chroma")


def test_an_unknown_model_at_the_endpoint_is_a_clear_error(embeddings_server):
    base_url, _ = embeddings_server
    with pytest.raises(EmbeddingError, match="embedding endpoint failed for model 'no-such-model'"):
        OpenAIEmbedder("no-such-model", base_url=base_url)
