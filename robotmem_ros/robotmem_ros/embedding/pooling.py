"""Pooling and normalisation of model outputs."""

from __future__ import annotations

import numpy as np


def mean_pool(token_vectors: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average the vectors of real tokens only ([batch, seq, dim] -> [batch, dim])."""
    weights = mask[..., None].astype(np.float32)
    summed = (token_vectors * weights).sum(axis=1)
    return summed / np.clip(weights.sum(axis=1), 1e-9, None)


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit-length float32 rows, so a dot product is the cosine."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.clip(norms, 1e-12, None))
