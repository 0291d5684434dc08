"""
An embedder that serves vectors computed beforehand, and a disk cache for batch embeddings.

``PrecomputedEmbedder`` has the interface the engine uses (``embed``, ``embed_query``,
``readability``, ``model_id``, ``dim``, ``sha256``, ``device``) and the identity of the real model,
so a store built with it is interchangeable with one built by the real embedder. Timing learn and
recall with it shows the store's own cost; the vectors are the real model's, computed in batches
outside the timed region, so dedup and ranking behave exactly as with the real embedder.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any, Sequence

from common import CACHE_DIR
import numpy as np


class PrecomputedEmbedder:
    """Looks vectors and readabilities up by text; unknown texts go to the real model."""

    backend = 'onnx'

    def __init__(self, real: Any, texts: Sequence[str], vectors: np.ndarray) -> None:
        self.real = real
        self.model_id = real.model_id
        self.dim = real.dim
        self.sha256 = real.sha256
        self.device = real.device
        self._vectors = dict(zip(texts, vectors))
        self._readability = {t: real.readability(t) for t in texts}
        self.misses = 0

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Make more texts known (outside any timed region)."""
        self._vectors.update(zip(texts, vectors))
        self._readability.update((t, self.real.readability(t)) for t in texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return the stored vectors; a miss is computed by the real model and counted."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            vector = self._vectors.get(text)
            if vector is None:
                self.misses += 1
                vector = self.real.embed([text])[0]
            out[i] = vector
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Vector of one query."""
        return self.embed([text])[0]

    def readability(self, text: str) -> float:
        """Share of tokens the real model reads (looked up when known)."""
        value = self._readability.get(text)
        return self.real.readability(text) if value is None else value


def embed_cached(embedder: Any, texts: Sequence[str], *, use_cache: bool = True,
                 cache_dir: pathlib.Path = CACHE_DIR) -> np.ndarray:
    """
    Batch-embed ``texts``; cache the matrix on disk keyed by model and exact texts.

    Embedding 100k synthetic memories takes minutes on a small CPU; the cache makes a second
    run of the benchmark pay that once. The key hashes every text, so a changed generator or
    model can never reuse stale vectors.
    """
    digest = hashlib.sha256(embedder.model_id.encode())
    for text in texts:
        digest.update(text.encode('utf-8'))
        digest.update(b'\0')
    path = cache_dir / f'{embedder.model_id}-{len(texts)}-{digest.hexdigest()[:16]}.npy'
    if use_cache and path.exists():
        return np.load(path)
    vectors = embedder.embed(list(texts)) if texts else np.zeros((0, embedder.dim), np.float32)
    if use_cache:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix('.tmp.npy')
        np.save(tmp, vectors)
        tmp.replace(path)
    return vectors
