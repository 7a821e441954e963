"""Packages that only optional parts need (pyproject's extras), imported where they are used.

The default server (SQLite, the embedded Chroma, offline critics) runs without them; a part that needs one and
finds it missing is refused in one sentence naming the extra that installs it, not with an ImportError."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtra

POSTGRES = "PostgreSQL as the store"
LLM_CRITICS = "an LLM critic"
OPENAI_EMBEDDINGS = "an OpenAI-compatible embedding model"
EXTRAS = {"psycopg": ("psycopg", "postgres"), "openai": ("openai", "llm")}


def need(module: str, what: str) -> ModuleType:
    """`module` imported (a dotted name of a package in EXTRAS, or of a module in one); MissingExtra when its
    package is not installed, saying that `what` needs it and how to install it."""
    package, extra = EXTRAS[module.split(".", 1)[0]]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".", 1)[0] != package:  # installed, but broken: its own error says more
            raise
        raise MissingExtra(f"{what} needs the {package} package: pip install 'hiveboard[{extra}]'") from None
