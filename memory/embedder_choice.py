"""Which embedder a configuration means, decided without loading one (no numpy, no model), so that a server can
refuse a configuration at start that it would otherwise find wrong only at its first memory call."""

from __future__ import annotations

from hiveboard.board.optional import OPENAI_EMBEDDINGS, need

MINILM_NAME = "all-MiniLM-L6-v2-onnx-int8"  # the configured name of the offline model (the package's name)
MINILM_DYNAMIC_NAME = f"int8-dynamic:{MINILM_NAME}"  # what it computes with, recorded with the vectors


def offline(model: str, base_url: str | None) -> bool:
    """Whether `model` at `base_url` is the offline model; any other is a model at an OpenAI-compatible endpoint."""
    return model in (MINILM_NAME, MINILM_DYNAMIC_NAME) and base_url is None


def check_installed(model: str = MINILM_NAME, base_url: str | None = None) -> None:
    """MissingExtra now when that embedder needs a package that is not installed (the `llm` extra's openai)."""
    if not offline(model, base_url):
        need("openai", OPENAI_EMBEDDINGS)
