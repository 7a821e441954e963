"""The board and the memory opened from the settings: one home for the CLI's commands and the memory file.

Imports stay inside the functions: `hiveboard board` and `agent` open the board without loading the
memory's models (see the cli module's docstring).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hiveboard.board import Board
    from hiveboard.memory.service import Memory

    from .config import Settings


def private_home(home) -> None:
    """The data directory, readable by its owner only (created so, or tightened if it is ours)."""
    from pathlib import Path

    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix" and home.stat().st_uid == os.geteuid() and home.stat().st_mode & 0o077:
        home.chmod(0o700)


def open_board(settings: Settings) -> Board:
    from hiveboard.board import Board, Limits, Store

    private_home(settings.home)
    limits = Limits(message_chars=settings.max_message_chars, output=settings.max_output_chars)
    return Board(Store(settings.db_path), lease_seconds=settings.lease_seconds, limits=limits)


def open_memory_for(settings: Settings, board: Board, rebuild: bool = False) -> Memory:
    from hiveboard.memory.embeddings import get_embedder
    from hiveboard.memory.service import open_memory

    embedder = get_embedder(settings.embedding_model, settings.embedding_base_url, settings.embedding_api_key)
    return open_memory(
        board,
        embedder,
        settings.home,
        chroma_url=settings.chroma_url,
        base_url=settings.embedding_base_url,
        rebuild=rebuild,
        collection=settings.chroma_collection,
    )
