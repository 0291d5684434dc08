"""
Re-embed every active memory with the engine's current model, resumably.

The start is one transaction: record the model in ``meta`` (with ``reindex_in_progress``),
recreate the vector table when the model or dimension changed, and mark every active memory
``embedded = 0``. After that the work is plain ``embedded = 0`` rows in id order, one batch per
transaction, so a crash or Ctrl-C loses at most one batch and the next run (or the node's own
``embed_pending`` with the same model) simply continues.
"""

from __future__ import annotations

from typing import Any, Callable

from robotmem_ros.engine import store
from robotmem_ros.engine.context import EngineContext
from robotmem_ros.errors import EmbeddingError, ValidationError


IN_PROGRESS = 'reindex_in_progress'
Progress = Callable[[int, int], None]


def reindex(ctx: EngineContext, batch_size: int = 64,
            progress: Progress | None = None) -> dict[str, Any]:
    """Run or resume a reindex; ``progress(done, total)`` is called after every batch."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError(f'batch_size must be a positive integer, got {batch_size!r}')
    embedder = ctx.embedding.embedder
    if embedder is None:
        raise EmbeddingError('reindex needs an embedding model, and none is loaded'
                             + (f': {ctx.embedding.error}' if ctx.embedding.error else
                                ' (embed_backend is none)'))
    with ctx.db.errors():
        return _run(ctx, embedder, batch_size, progress)


def _run(ctx: EngineContext, embedder: Any, batch_size: int,
         progress: Progress | None) -> dict[str, Any]:
    resumed, recreated = _start(ctx, embedder)
    ctx.db.vectors.reset()  # re-embedded rows get new seqs; drop the old entries at once
    conn = ctx.db.reader()
    total = store.count_unembedded(conn, active_only=True)
    done = embedded = 0
    last_id = 0
    while True:
        rows = store.unembedded(conn, batch_size, after=last_id)
        if not rows:
            break
        readable = [(mid, text) for mid, text in rows if ctx.embedding.readable(text)]
        vectors = embedder.embed([text for _, text in readable]) if readable else []
        by_id = {mid: vectors[i] for i, (mid, _) in enumerate(readable)}
        with ctx.db.write() as wconn:
            for mid, _ in rows:
                store.put_vector(wconn, mid, by_id.get(mid))
        done += len(rows)
        embedded += len(by_id)
        last_id = rows[-1][0]
        if progress is not None:
            progress(done, total)
    with ctx.db.write() as wconn:
        store.delete_meta(wconn, IN_PROGRESS)
    ctx.embedding.reindex_needed = False
    return {'model_id': embedder.model_id, 'dim': embedder.dim, 'processed': done,
            'embedded': embedded, 'unreadable': done - embedded, 'resumed': resumed,
            'recreated_table': recreated}


def _start(ctx: EngineContext, embedder: Any) -> tuple[bool, bool]:
    """Begin (or recognise a resumable) reindex; return (resumed, vector table recreated)."""
    with ctx.db.write() as conn:
        if store.get_meta(conn, IN_PROGRESS) == embedder.model_id and \
                store.get_meta(conn, 'embed_dim') == str(embedder.dim):
            return True, False
        same = (store.get_meta(conn, 'embed_model_id') == embedder.model_id
                and store.get_meta(conn, 'embed_dim') == str(embedder.dim))
        store.set_meta(conn, 'embed_model_id', embedder.model_id)
        store.set_meta(conn, 'embed_dim', str(embedder.dim))
        store.set_meta(conn, 'embed_sha256', embedder.sha256)
        store.set_meta(conn, IN_PROGRESS, embedder.model_id)
        store.unembed_all(conn, drop_vectors=not same)
        return False, not same
