"""The offline model quantized at first use: cached once per source file, usable without a writable cache,
close to the export as shipped, and a model of its own name."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest
from conftest import START_TIMEOUT

from hiveboard.memory import embeddings
from hiveboard.memory.embeddings import MINILM_DYNAMIC_NAME, MINILM_NAME, MiniLM, get_embedder
from hiveboard.memory.index import EmbeddingMismatch, VectorIndex

SENTENCES = [
    "The users search endpoint built SQL from strings; use query parameters.",
    "Cron ran twice when daylight saving time ended.",
    "flaky test depends on the order the tests run in",
    "lru_cache on a method keeps every instance alive",
    "How do I stop retrying a payment that is not idempotent?",
]


def test_the_quantized_model_stays_close_to_the_export():
    shipped, fast = MiniLM(quantized=False), get_embedder()
    assert (shipped.name, fast.name) == (MINILM_NAME, MINILM_DYNAMIC_NAME)
    cosine = np.sum(shipped.embed(SENTENCES) * fast.embed(SENTENCES), axis=1)
    assert cosine.min() > 0.97, cosine
    ranking = fast.embed(SENTENCES) @ fast.embed(["SQL injection through string formatting"])[0]
    assert int(np.argmax(ranking)) == 0


def test_a_texts_vector_does_not_depend_on_the_texts_embedded_with_it():
    # the quantized model scales activations by their range over a whole run: a text run beside a longer one
    # (padded to it) came out differently from the same text alone, which is how a query is embedded
    model = get_embedder()
    longer = " ".join(f"step_{n} parses the header and retries the request" for n in range(40))
    alone = model.embed([SENTENCES[2]])
    among = model.embed([longer, SENTENCES[2], SENTENCES[0]])
    assert np.array_equal(among[1], alone[0])
    assert np.array_equal(among[0], model.embed([longer])[0])


def test_two_processes_quantize_into_one_cached_file(tmp_path):
    script = (
        "from hiveboard.memory.embeddings import minilm_files, quantized_minilm; "
        "import hashlib, sys; sys.stdout.write(hashlib.sha256(quantized_minilm(minilm_files()[0])).hexdigest())"
    )
    env = {"HIVEBOARD_MODEL_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    digests = [p.communicate(timeout=START_TIMEOUT)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    models = [f for f in files if f.endswith(".onnx")]
    assert len(models) == 1 and not [f for f in files if f.endswith(".tmp")], files
    assert digests[0] == digests[1] == hashlib.sha256((tmp_path / "cache" / models[0]).read_bytes()).hexdigest()


@pytest.mark.slow  # quantizes the model anew
def test_an_unwritable_cache_still_gives_the_quantized_model(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("HIVEBOARD_MODEL_CACHE", str(blocker / "cache"))  # mkdir fails (even as root)
    model = MiniLM()
    assert model.name == MINILM_DYNAMIC_NAME
    assert np.allclose(model.embed(SENTENCES), get_embedder().embed(SENTENCES), atol=1e-5)


def test_a_failed_quantization_falls_back_to_the_export_under_its_own_name(tmp_path, monkeypatch):
    def broken(*_):
        raise ImportError("No module named 'onnx'")

    monkeypatch.setenv("HIVEBOARD_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "_quantize", broken)
    model = MiniLM()
    assert model.name == MINILM_NAME
    VectorIndex(get_embedder(), path=tmp_path / "chroma")  # an index of the quantized model
    with pytest.raises(EmbeddingMismatch, match="hiveboard reindex"):
        VectorIndex(model, path=tmp_path / "chroma")
