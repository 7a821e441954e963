"""What the memory layer raises, in a module of its own so the server can catch these without
importing Chroma or onnxruntime (they load when the memory is first used).

    RuntimeError
    ├── EmbeddingError      the embedding model could not be loaded or called
    ├── EmbeddingMismatch   the index was built with another embedding model
    └── IndexUnavailable    no vector index could answer (searches fall back to keywords)
"""


class EmbeddingError(RuntimeError):
    """The embedding model could not be loaded or called; the message says what to do."""


class EmbeddingMismatch(RuntimeError):
    """The index was built with another embedding model."""


class IndexUnavailable(RuntimeError):
    """No vector index could answer right now (searches fall back to keywords)."""
