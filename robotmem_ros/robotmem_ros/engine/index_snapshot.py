"""
The vector index's arrays saved beside the store, so that a start reads one file, not 1M rows.

Loading the index from ``memory_vectors`` builds a Python row per vector: 5.3 s of a 6.5 s
cold start at 1M memories (docs/performance.md, "Cold start from a snapshot"). The arrays
(sign-bit codes, ids, seqs, filter columns) are saved to ``<store>-vindex`` and read back at
the next start; the rows written since are then read from SQLite as on any search.

The SQLite file stays the one truth; the snapshot is a cache of a past state of the index:

- A row deleted or replaced since is an entry the index already handles (a search finds its
  ``(memory_id, seq)`` gone and drops it), and a row added since has a higher seq.
- It is used only when it can be a past state of *this* store: it names the store's id (a
  store made again at the same path has another, even with the same rows), the store's seq
  high-water mark reaches the snapshot's last seq (a store restored from an older copy does
  not), no more rows up to that seq exist than the snapshot held, most still exist (after a
  reindex, rebuilding beats carrying dead entries), and sampled rows, the newest among them,
  hold the same memory and code (a model changed without a reindex leaves the old
  rows as they were), at least one of the newest still stored. Anything else — another format
  or schema, a cut or unreadable file — is logged and the index is built from the rows.
- It is written to a temporary file, synced and renamed, so a crash leaves the old one whole.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any

import numpy as np

from robotmem_ros.engine import vector_store
from robotmem_ros.engine.schema import CONTEXT_PATHS, SCHEMA_VERSION

LOG = logging.getLogger('robotmem.engine')

FORMAT = 2  # 2: the store's id
SUFFIX = '-vindex'
# The arrays saved, with their dtypes; each has one entry (row) per index position.
ARRAYS = {'codes': np.uint64, 'ids': np.int64, 'seqs': np.int64, 'coll': np.int32,
          'sess': np.int32, 'fact': np.bool_, 'alive': np.bool_, 'ctx': np.int32}
# Rows compared with the store: spread over the snapshot, and its newest (where a store that
# diverged from it after a restore differs first).
SAMPLED_SPREAD = 32
SAMPLED_NEWEST = 32
# A snapshot whose rows mostly left the store (a reindex) is not worth loading.
MIN_LIVE_SHARE = 0.9


class Snapshot:
    """Arrays and bookkeeping of a saved index (positions ``0 .. size - 1``)."""

    def __init__(self, arrays: dict[str, np.ndarray], last_seq: int, skipped: int,
                 names: dict[str, dict[str, int]], store_id: str) -> None:
        self.arrays = arrays
        self.last_seq = last_seq
        self.skipped = skipped
        self.names = names
        self.store_id = store_id

    @property
    def size(self) -> int:
        """Positions held."""
        return len(self.arrays['ids'])


def path_for(store_path: pathlib.Path) -> pathlib.Path:
    """Where the snapshot of the store at ``store_path`` lives (beside its -wal and -shm)."""
    return store_path.with_name(store_path.name + SUFFIX)


def save(path: pathlib.Path, snapshot: Snapshot) -> None:
    """Write ``snapshot`` atomically (temporary file, fsync, rename); raises OSError."""
    meta = {'format': FORMAT, 'schema': SCHEMA_VERSION, 'paths': list(CONTEXT_PATHS),
            'last_seq': snapshot.last_seq, 'skipped': snapshot.skipped, 'names': snapshot.names,
            'store_id': snapshot.store_id}
    _remove_orphans(path)
    tmp = path.with_name(f'{path.name}.{os.getpid()}.tmp')  # one per process: two may save
    try:
        with open(tmp, 'wb') as out:
            np.savez(out, meta=np.array(json.dumps(meta)), **snapshot.arrays)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _remove_orphans(path: pathlib.Path) -> None:
    """Delete temporary files of processes that died while saving (each is a whole index)."""
    for orphan in path.parent.glob(f'{path.name}.*.tmp'):
        pid = orphan.name[len(path.name) + 1:-len('.tmp')]
        if pid.isdigit() and not _running(int(pid)):
            orphan.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def load(path: pathlib.Path, conn: Any) -> Snapshot | None:
    """
    Read the snapshot at ``path`` and check it against the store ``conn`` reads; None if unusable.

    Says in the log why a snapshot that exists is not used.
    """
    if not path.exists():
        return None
    try:
        snapshot = _read(path)
        reason = _mismatch(snapshot, conn)
    except Exception as exc:  # noqa: BLE001 - any unreadable file only costs a rebuild
        reason = f'unreadable ({type(exc).__name__}: {exc})'
    if reason:
        LOG.info('vector index: snapshot %s not used (%s); building from the store', path,
                 reason)
        return None
    return snapshot


def _read(path: pathlib.Path) -> Snapshot:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data['meta']))
        if meta.get('format') != FORMAT:
            raise ValueError(f'format {meta.get("format")}, expected {FORMAT}')
        if meta.get('schema') != SCHEMA_VERSION or meta.get('paths') != list(CONTEXT_PATHS):
            raise ValueError(f'written for schema {meta.get("schema")}')
        arrays = {name: data[name] for name in ARRAYS}
    size = len(arrays['ids'])
    for name, dtype in ARRAYS.items():
        if arrays[name].dtype != dtype or len(arrays[name]) != size:
            raise ValueError(f'array {name} is {arrays[name].dtype} x {len(arrays[name])}')
    if arrays['codes'].ndim != 2 or arrays['ctx'].shape[1:] != (len(CONTEXT_PATHS),):
        raise ValueError('arrays of the wrong shape')
    names = {kind: {str(k): int(v) for k, v in meta['names'][kind].items()}
             for kind in ('collection', 'session')}
    return Snapshot(arrays, int(meta['last_seq']), int(meta['skipped']), names,
                    str(meta['store_id']))


def _mismatch(snapshot: Snapshot, conn: Any) -> str:
    """Why ``snapshot`` cannot be a past state of this store's index; '' when it can."""
    if vector_store.store_id(conn) != snapshot.store_id:
        return 'taken of another store (a store made again at this path?)'
    if vector_store.seq_high_water(conn) < snapshot.last_seq:
        return 'the store never reached its last row (another or a restored store)'
    stored = vector_store.count_through(conn, snapshot.last_seq)
    alive = int(snapshot.arrays['alive'].sum())
    if stored > alive + snapshot.skipped:
        return f'the store holds {stored} rows up to its last one, the snapshot {alive}'
    if stored < MIN_LIVE_SHARE * alive:
        return f'{alive - stored} of its {alive} rows left the store (a reindex)'
    return _sample_mismatch(snapshot, conn)


def _sample_mismatch(snapshot: Snapshot, conn: Any) -> str:
    """Compare sampled live rows with the store: each one still stored must be the same."""
    live = np.flatnonzero(snapshot.arrays['alive'])
    if not live.size:
        return ''
    spread = live[np.linspace(0, live.size - 1, min(SAMPLED_SPREAD, live.size)).astype(int)]
    positions = np.unique(np.concatenate([spread, live[-SAMPLED_NEWEST:]]))
    seqs = snapshot.arrays['seqs'][positions].tolist()
    stored = vector_store.codes_of_seqs(conn, seqs)
    for position, seq in zip(positions.tolist(), seqs):
        row = stored.get(seq)
        if row is not None and row != (int(snapshot.arrays['ids'][position]),
                                       snapshot.arrays['codes'][position].tobytes()):
            return f'the row of seq {seq} differs from the store'
    # A store that diverged (restored, then written) differs first at the newest seqs; with
    # none of them left there is nothing to tell it from this store's past.
    if not any(seq in stored for seq in snapshot.arrays['seqs'][live[-SAMPLED_NEWEST:]].tolist()):
        return 'none of its newest rows is left in the store to compare'
    return ''
