"""The Chroma index over memory items: embedded (PersistentClient) or a Chroma server (HttpClient).

One collection, cosine space; each vector's metadata carries kind, task_type, task_id, deprecated
and created_at so searches filter inside Chroma. Tags are filtered in SQLite only: as one metadata key
per tag, one item with 60,000 tags broke Chroma's compaction and with it search by meaning for everyone. The collection records the embedding model's name
and dimension; opening it with another model is refused (vectors of two models do not compare) and
`hiveboard reindex` rebuilds it from SQLite.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import chromadb
import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import NotFoundError
from chromadb.utils.embedding_functions import register_embedding_function

from hiveboard.board.knowledge import MemoryItem

from .embeddings import MINILM_NAME, Embedder, get_embedder
from .errors import EmbeddingMismatch, IndexUnavailable
from .neighbours import Neighbours

COLLECTION = "hiveboard_memory"


@register_embedding_function
class HiveboardEmbedding(EmbeddingFunction[Documents]):
    """hiveboard's embedder as a Chroma embedding function, so the collection reopens with its model."""

    def __init__(self, model: str = MINILM_NAME, base_url: str | None = None):
        self.model = model
        self.base_url = base_url

    def __call__(self, input: Documents) -> Embeddings:
        return list(get_embedder(self.model, self.base_url).embed(list(input)))

    @staticmethod
    def name() -> str:
        return "hiveboard"

    def get_config(self) -> dict:
        return {"model": self.model, "base_url": self.base_url}

    @staticmethod
    def build_from_config(config: dict) -> HiveboardEmbedding:
        return HiveboardEmbedding(config.get("model", MINILM_NAME), config.get("base_url"))

    def default_space(self) -> str:
        return "cosine"


def chroma_client(path: Path | None = None, url: str | None = None):
    settings = ChromaSettings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url)
        return chromadb.HttpClient(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 8000,
            ssl=parsed.scheme == "https",
            settings=settings,
        )
    return chromadb.PersistentClient(path=str(path), settings=settings)


class VectorIndex:
    def __init__(
        self,
        embedder: Embedder,
        *,
        path: Path | None = None,
        url: str | None = None,
        base_url: str | None = None,
        rebuild: bool = False,
        collection: str = COLLECTION,
    ):
        self.embedder = embedder
        self.name = collection
        self.function = HiveboardEmbedding(embedder.name if base_url is None else embedder.model, base_url)
        try:
            self.client = chroma_client(path, url)
            if rebuild:
                self._drop()
            self.collection = self._open()
        except EmbeddingMismatch:
            raise
        except Exception as exc:  # an unreachable server, a damaged directory: say where
            raise IndexUnavailable(f"cannot open the Chroma index at {url or path}: {exc}") from exc

    def _drop(self) -> None:
        if self._exists():
            self.client.delete_collection(self.name)

    def _exists(self) -> bool:
        return self.name in {c if isinstance(c, str) else c.name for c in self.client.list_collections()}

    def _open(self):
        if self._exists():
            return self._existing()
        try:
            return self.client.create_collection(
                self.name,
                embedding_function=self.function,
                configuration={"hnsw": {"space": "cosine"}},
                metadata={"hiveboard_model": self.embedder.name, "hiveboard_dim": self.embedder.dim},
            )
        except Exception:
            if not self._exists():
                raise
            # nodes that start together on one Chroma server: another created the collection since we looked
            return self._existing()

    def _existing(self):
        collection = self.client.get_collection(self.name)
        meta = collection.metadata or {}
        if meta.get("hiveboard_model") != self.embedder.name or meta.get("hiveboard_dim") != self.embedder.dim:
            raise EmbeddingMismatch(
                f"the memory index was built with {meta.get('hiveboard_model')} "
                f"({meta.get('hiveboard_dim')}-d) but this server embeds with {self.embedder.name} "
                f"({self.embedder.dim}-d); vectors of two models do not compare. Run `hiveboard reindex` "
                "to rebuild the index from SQLite with the configured model"
            )
        return self.client.get_collection(self.name, embedding_function=self.function)

    def rebuild(self) -> None:
        """Drop the collection and create it empty for the configured model."""
        self._drop()
        self.collection = self._open()

    def upsert(self, items: list[MemoryItem], vectors: list[np.ndarray], *, first: bool = True) -> None:
        """Index each item's readings (rows of its array: the first under the item's id, a second, its content's,
        under `ID:b`); `first=False` indexes only the second ones."""
        rows = [
            (item, f"{item.id}:b" if n else str(item.id), vector)
            for item, readings in zip(items, vectors)
            for n, vector in enumerate(readings)
            if n or first
        ]
        if not rows:
            return
        self._call(
            lambda: self.collection.upsert(
                ids=[row_id for _, row_id, _ in rows],
                embeddings=[v for *_, v in rows],
                metadatas=[
                    {
                        "kind": i.kind,
                        "task_type": i.task_type or "",
                        "task_id": i.task_id or 0,
                        "deprecated": i.deprecated,
                        "created_at": i.created_at,
                    }
                    for i, *_ in rows
                ],
            )
        )

    def query(
        self,
        vector: np.ndarray,
        n: int,
        *,
        task_type: str | None = None,
        kinds: list[str] | None = None,
        include_deprecated: bool = False,
        first_only: bool = False,
    ) -> Neighbours:
        """The items of the `n` nearest vectors, filtered inside Chroma (tags are not here: see upsert), each with
        the cosine similarity of its best reading. `first_only`: score items by their first reading alone (the
        second ones fetched are dropped)."""
        clauses: list[dict] = []
        if task_type:
            clauses.append({"task_type": task_type})
        if kinds:
            clauses.append({"kind": {"$in": list(kinds)}})
        if not include_deprecated:
            clauses.append({"deprecated": False})
        where = clauses[0] if len(clauses) == 1 else ({"$and": clauses} if clauses else None)
        result = self._call(
            lambda: self.collection.query(query_embeddings=[vector], n_results=n, where=where, include=["distances"])
        )
        best: dict[int, float] = {}  # an item's best reading (the results come best first)
        for row_id, distance in zip(result["ids"][0], result["distances"][0]):
            item_id, second, _ = row_id.partition(":")
            if not (second and first_only):
                best.setdefault(int(item_id), 1.0 - float(distance))
        return Neighbours(list(best.items()), len(result["ids"][0]) == n)

    def _call(self, operation):
        """Run a Chroma call; a collection rebuilt under us (reindex) is opened again, other failures are
        reported as IndexUnavailable so searches fall back to keywords."""
        try:
            try:
                return operation()
            except NotFoundError:
                self.collection = self._open()
                return operation()
        except EmbeddingMismatch:
            raise
        except Exception as exc:  # Chroma raises many types (HTTP, Rust bindings); callers need one
            raise IndexUnavailable(f"the vector index failed: {exc}") from exc

    def count(self) -> int:
        return self._call(self.collection.count)
