"""
The engine's view of its embedder: identity checks, failures, and BM25-only fallback.

Embedding is best effort. A missing model, a failing inference or a database embedded with
another model never fails a learn or a recall; they run without vectors and say so.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

import numpy as np

from robotmem_ros.engine import store
from robotmem_ros.errors import RobotMemError

LOG = logging.getLogger('robotmem.engine')
LOG_EVERY_S = 30.0


class EmbeddingState:
    """Wraps an optional embedder with failure counting and throttled logging."""

    def __init__(self, embedder: Any | None, min_readability: float,
                 load_error: str = '') -> None:
        self.embedder = embedder
        self.min_readability = min_readability
        self.error = load_error
        self.failures = 0
        self.skipped = 0  # perceptions left BM25-only because the backlog was full
        self.reindex_needed = False
        self._last_log = 0.0
        self._lock = threading.Lock()

    @property
    def usable(self) -> bool:
        """Vectors may be written and searched (model present and matching the DB)."""
        return self.embedder is not None and not self.reindex_needed

    @property
    def model_id(self) -> str:
        """Model identity, or '' without an embedder."""
        return self.embedder.model_id if self.embedder is not None else ''

    def bind(self, conn: Any) -> None:
        """Record the model in the DB meta table, or detect that the DB uses another one."""
        if self.embedder is None:
            return
        stored = store.get_meta(conn, 'embed_model_id')
        stored_dim = store.get_meta(conn, 'embed_dim')
        if stored is None:
            store.set_meta(conn, 'embed_model_id', self.embedder.model_id)
            store.set_meta(conn, 'embed_dim', str(self.embedder.dim))
            store.set_meta(conn, 'embed_sha256', self.embedder.sha256)
        elif stored != self.embedder.model_id or stored_dim != str(self.embedder.dim):
            self.reindex_needed = True
            LOG.warning('database was embedded with %s (dim %s) but the node runs %s (dim %d): '
                        'recall runs BM25-only until `robotmem reindex`', stored, stored_dim,
                        self.embedder.model_id, self.embedder.dim)

    def check_store(self, conn: Any) -> bool:
        """
        Follow a model change another process made to the store (``robotmem reindex``).

        Called inside a write once another connection committed. A store now recorded with
        another model or dimension stops this engine's vector writes and searches as at start,
        so no vector of this model lands in a store labelled with the other (it would stay out
        of every search after a restart, with no reindex asked for); the memories it learns
        wait unembedded for that model. A store brought to this engine's model resumes them.
        Return True when the engine changed its mind (its vector index must start again).
        """
        if self.embedder is None:
            return False
        stored = store.get_meta(conn, 'embed_model_id')
        if stored is None:
            return False
        needed = (stored != self.embedder.model_id
                  or store.get_meta(conn, 'embed_dim') != str(self.embedder.dim))
        if needed == self.reindex_needed:
            return False
        self.reindex_needed = needed
        if needed:
            LOG.warning('the store is now embedded with %s (dim %s) by another process, and '
                        'this engine runs %s (dim %d): vectors are neither written nor searched '
                        'until it runs that model', stored, store.get_meta(conn, 'embed_dim'),
                        self.embedder.model_id, self.embedder.dim)
        else:
            LOG.info('the store is embedded with %s again: vectors are written and searched',
                     stored)
        return True

    def readable(self, text: str) -> bool:
        """Return True when the model reads enough of ``text`` for its vector to mean something."""
        if self.embedder is None:
            return False
        try:
            return self.embedder.readability(text) >= self.min_readability
        except Exception as exc:  # noqa: BLE001 - any embedder fault means "not readable"
            self._failed(exc)
            return False

    def embed(self, texts: Sequence[str]) -> np.ndarray | None:
        """Embed texts; None (counted, logged) on any failure."""
        if not self.usable or not texts:
            return None
        try:
            return self.embedder.embed(list(texts))
        except Exception as exc:  # noqa: BLE001 - embedding must never fail a request
            self._failed(exc)
            return None

    def embed_query(self, text: str) -> np.ndarray | None:
        """Embed one query through the embedder's cache; None when unusable or unreadable."""
        if not self.usable or not self.readable(text):
            return None
        try:
            return self.embedder.embed_query(text)
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)
            return None

    def embed_fact(self, text: str) -> np.ndarray | None:
        """Embed a text to store, or None when the model cannot read it."""
        if not self.readable(text):
            return None
        vectors = self.embed([text])
        return None if vectors is None else vectors[0]

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self.failures += 1
            now = time.monotonic()
            if now - self._last_log < LOG_EVERY_S:
                return
            self._last_log = now
        kind = 'error' if isinstance(exc, RobotMemError) else type(exc).__name__
        LOG.warning('embedding failed (%s: %s); running BM25-only for this call '
                    '(%d failures so far)', kind, exc, self.failures)
