"""
In-process vector index over the ``memory_vectors`` table: binary codes scanned, floats rescored.

Why this design (measured on the 2-core target, see docs/performance.md): sqlite-vec's vec0
table scans every float vector per query (44-66 ms at 100k) and costs one 1.67 MB chunk per
collection partition; an HNSW graph (usearch i8) took 190 s to build for 100k vectors on this
machine and cannot filter by session in its Python API. A sign bit per dimension (48 bytes for
384 dimensions) held in numpy and scanned with popcount is 30x smaller than the floats, needs
no build, filters by collection / session / type and the common context paths (filter ids,
engine/schema.py) with boolean masks *before* ranking, and the float vectors of the best
candidates are re-read from SQLite to rank them exactly.

The SQLite file is the only source of truth. The index is rebuilt from it at start and catches
up on every search with the rows committed since (``seq`` grows with every vector written, by
any process). A vector deleted or replaced in the database stays in the arrays until a search
finds that its ``(memory_id, seq)`` is gone; rescoring reads the row back, so a stale entry can
cost a candidate slot but can never be returned. When fewer than ``k`` candidates survive, the
pool grows until the filtered set is exhausted: a filtered search returns ``k`` results when
``k`` exist.

From ``ann_min_vectors`` vectors on (and with faiss installed), an IVF stage
(engine/ann_stage.py) is built in a background thread from the floats in SQLite and proposes
the candidates instead of the full scan; the scan answers while it builds, and whenever its
candidates leave fewer than ``k`` results (a selective SQL filter), so that guarantee holds.
The stage lives in RAM only and is rebuilt at every start: the file stays the one truth, and
no crash can leave a stale index behind.

Above ``int8_max_vectors`` (where no 8-bit copy is held) the arrays are also saved beside the
store once it holds SNAPSHOT_EVERY vectors, and again each time as many more were written, in a
background thread; a start reads them back and loads only the rows written since
(engine/index_snapshot.py says when a snapshot is not used).

Up to ``int8_max_vectors`` vectors the index also holds an 8-bit copy of each (one byte per
dimension and a scale). The copy gives each candidate an estimate of its cosine and a bound on
the estimate's error, so candidates are rescored best first and the reading stops once no
unread one can reach the top ``k``: the same results as rescoring every candidate, from a
fraction of the float reads (docs/performance.md, "Rescoring best first").
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
import functools
import heapq
import logging
import pathlib
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from robotmem_ros.engine import ann_stage, heap, index_snapshot, vector_store
from robotmem_ros.engine.schema import CONTEXT_PATHS

LOG = logging.getLogger('robotmem.engine')

# Float vectors re-read per search; small filtered sets are rescored entirely (exact). The
# pool also grows with the filtered set: sign bits rank near-duplicates coarsely, and a fixed
# 256 gave recall@10 0.97 at 100k but 0.69 at 1M on the scale bench's vectors; a share of
# 1/400 holds 0.95-0.97 from 100k to 1M (docs/performance.md, "Rescoring pool").
RESCORE_MIN = 256
RESCORE_PER_K = 10
RESCORE_SHARE = 1 / 400
WORD_BYTES = 8
GROW = 1.5
LOAD_CHUNK = 50_000
FLOAT_LOAD_CHUNK = 1_000  # rows per read with floats: larger reads left +140 MiB of heap at 100k
# The approximate stage re-reads this many floats per search (at least 2 k): 80 hold recall@10
# at 0.99 at 1M with its 4-bit codes (docs/performance.md). It is rebuilt, with sqrt(N)
# lists again, each time the store has grown this many times over since it was trained.
# Floats are read in blocks of ANN_BLOCK to fill it.
ANN_CANDIDATES = 80
# A list of a built stage that outgrows its buffer moves to one twice as large (its ids at the
# first append, its codes once their power-of-two capacity is full) and frees the old one
# (about 200 KB at 1M) into the heap, which keeps it resident until a trim: with the scalar
# codes' lists, 1 000 single appends held 129 MiB more until the next one. A
# trim after every TRIM_APPENDS appended vectors, on the thread that appended them, keeps that
# under 10 MiB (0.06 ms p50 a trim beside the stage alone; docs/performance.md, "One code per
# vector").
TRIM_APPENDS = 64
ANN_REBUILD_GROWTH = 4
ANN_BLOCK = 20_000
SAMPLE_CHUNK = 10_000  # seqs per statement of the training sample (SQLite's variable limit)
# Best-first rescoring reads floats in steps of at least this many (one statement each), and
# pads each estimate's error bound by this much for float32 rounding in both dot products.
BEST_FIRST_STEP = 16
ROUNDING_SLACK = 1e-4
# A snapshot is saved once the index holds this many vectors the last one lacks (the first at
# this size): at most about 0.3 s of a start for the rows it lacks, one write of the arrays (94
# bytes a vector: 94 MB and 0.2 s at 1M) per 50 000 vectors stored.
SNAPSHOT_EVERY = 50_000
# The masks of the last MASKS_KEPT selections (a learn's dedup search, a recall's, a filtered
# one) are kept and extended by the positions appended since: computed whole, a 1M-row mask
# took 0.9 ms of every search at 1M (five passes over the columns, out of the CPU's caches after
# the rest of a learn). Each costs a byte a position (1 MB at 1M) plus MASK_SLACK.
MASKS_KEPT = 4
MASK_SLACK = 4_096


def code_of(vector: np.ndarray) -> bytes:
    """Sign bits of a vector, padded to whole 64-bit words (what the index scans)."""
    bits = np.packbits(np.asarray(vector) > 0)
    pad = (-len(bits)) % WORD_BYTES
    return bits.tobytes() + b'\0' * pad


def to_blob(vector: np.ndarray) -> bytes:
    """Serialize a float vector as little-endian float32."""
    return np.asarray(vector, dtype='<f4').tobytes()


class VectorIndex:
    """Binary codes plus filter columns of every stored vector, kept in step with SQLite."""

    def __init__(self, reader: Callable[[], Any], ann_min_vectors: int = 0,
                 ann_nprobe: int = 32, opener: Callable[[], Any] | None = None,
                 int8_max_vectors: int = 0, snapshot: pathlib.Path | None = None) -> None:
        self._reader = reader
        self._opener = opener  # a private connection for the builder, which may outlive a close
        self._ann_min = ann_min_vectors if ann_stage.available() and opener else 0
        self._ann_nprobe = ann_nprobe
        self._ann: ann_stage.AnnStage | None = None
        self._ann_lock = threading.Lock()  # faiss's add and search must not run side by side
        self._ann_builder: threading.Thread | None = None
        self._ann_error = ''
        self._appended = 0  # vectors appended to a stage since the last trim
        self._generation = 0  # bumped by reset(): a build begun before it is thrown away
        self._stopping = False
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._size = 0
        self._words = 0
        self._codes = np.zeros((0, 0), dtype=np.uint64)
        self._ids = np.zeros(0, dtype=np.int64)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._coll = np.zeros(0, dtype=np.int32)
        self._sess = np.zeros(0, dtype=np.int32)
        self._fact = np.zeros(0, dtype=bool)
        self._alive = np.zeros(0, dtype=bool)
        self._ctx = np.zeros((0, len(CONTEXT_PATHS)), dtype=np.int32)  # filter ids per row
        self._names: dict[str, dict[str, int]] = {'collection': {}, 'session': {'': 0}}
        self._last_seq = 0
        self._skipped = 0  # rows of another code width (another model) left out
        self._int8_max = int8_max_vectors
        self._int8_on: bool | None = None  # decided at the first load, from the store's size
        self._dim = 0
        self._q8 = np.zeros((0, 0), dtype=np.int8)
        self._q8_scale = np.zeros(0, dtype=np.float32)  # 0 marks a row without a float vector
        self._snapshot = snapshot  # where the arrays are saved; None: never
        self._saved_size = 0  # positions the newest snapshot holds (read or written)
        self._restored = 0  # positions read from a snapshot at start
        self._saver: threading.Thread | None = None
        self._store_id: str | None = None  # the store's id, which a snapshot names
        # Bumped whenever positions already held change (a restore, a reset): kept masks older
        # than that are computed again.
        self._changes = 0
        self._masks: collections.OrderedDict[tuple[Any, ...], _Mask] = (
            collections.OrderedDict())

    # --- keeping up with the database ----------------------------------------------------

    def reset(self) -> None:
        """
        Forget everything (after a reindex); the next search reloads from the database.

        Under the refresh lock, then the lock (refresh's order): no load, stage install or
        snapshot save spans it. The position arrays are replaced by empty ones, not refilled in
        place: a search in flight reads the arrays it bound with its mask, whose positions
        stay as they were, and the next load allocates new arrays.
        """
        with self._refresh_lock:
            if self._saver is not None:
                self._saver.join()  # a save in flight would write the dropped rows again
            with self._lock:
                for name in ('_codes', '_ids', '_seqs', '_coll', '_sess', '_fact', '_alive',
                             '_ctx', '_q8', '_q8_scale'):
                    old = getattr(self, name)
                    setattr(self, name, np.zeros((0, *old.shape[1:]), dtype=old.dtype))
                self._size = self._words = self._dim = 0
                self._last_seq = 0
                self._skipped = 0
                self._ann = None
                self._generation += 1
                self._int8_on = None
                self._saved_size = 0
                self._changes += 1
            if self._snapshot is not None:  # its rows are the ones just dropped
                self._snapshot.unlink(missing_ok=True)

    def close(self) -> None:
        """
        Let a background build stop at its next block; it closes its own connection.

        Not joined: a training step can take seconds at 1M and a node's shutdown must not wait.
        """
        self._stopping = True

    def refresh(self) -> int:
        """Load the vectors committed since the last call (all of them the first time)."""
        with self._refresh_lock:
            loaded = self._load_since()
            if self._ann_min:
                self._keep_ann()
            self._keep_snapshot()
            return loaded

    def _load_since(self) -> int:
        conn = self._reader()
        if self._store_id is None:
            self._store_id = vector_store.store_id(conn)
        if self._int8_on is None:  # a store already over the bound never reads its floats
            self._int8_on = 0 < self._int8_max >= vector_store.seq_span(conn)
        if self._size == 0 and self._last_seq == 0 and not self._int8_on:
            self._restore(conn)
        loaded = 0
        while True:  # in chunks: a million Python rows at once would double the start RSS
            chunk = FLOAT_LOAD_CHUNK if self._int8_on else LOAD_CHUNK
            rows = vector_store.codes_since(conn, self._last_seq, chunk,
                                            floats=bool(self._int8_on))
            if rows:
                with self._lock:
                    self._append(rows)
                loaded += len(rows)
            if len(rows) < chunk:
                return loaded

    def _restore(self, conn: Any) -> None:
        """Start from the saved arrays when they are a past state of this store's index."""
        if self._snapshot is None:
            return
        began = time.perf_counter()
        snapshot = index_snapshot.load(self._snapshot, conn)
        if snapshot is None or not snapshot.size:
            return
        with self._lock:
            for name, array in snapshot.arrays.items():
                setattr(self, f'_{name}', np.asfortranarray(array) if name == 'ctx' else array)
            self._size = self._saved_size = self._restored = snapshot.size
            self._words = snapshot.arrays['codes'].shape[1]
            self._last_seq, self._skipped = snapshot.last_seq, snapshot.skipped
            self._names = snapshot.names
            self._changes += 1
        LOG.info('vector index: %d vectors read from %s in %.2f s', snapshot.size,
                 self._snapshot, time.perf_counter() - began)

    def _keep_snapshot(self) -> None:
        """Save the arrays in a background thread once SNAPSHOT_EVERY vectors are unsaved."""
        if (self._snapshot is None or self._int8_on or self._stopping or self._store_id is None
                or self._size - self._saved_size < SNAPSHOT_EVERY
                or (self._saver is not None and self._saver.is_alive())):
            return
        with self._lock:
            size = self._size
            snapshot = index_snapshot.Snapshot(
                {name: getattr(self, f'_{name}')[:size] for name in index_snapshot.ARRAYS},
                self._last_seq, self._skipped,
                {kind: dict(names) for kind, names in self._names.items()}, self._store_id)
        self._saved_size = size  # a failed save is tried again SNAPSHOT_EVERY vectors later
        # Positions below ``size`` never change, so the thread reads them without the lock.
        self._saver = threading.Thread(target=_save, args=(self._snapshot, snapshot),
                                       name='robotmem-index-snapshot', daemon=True)
        self._saver.start()

    def _append(self, rows: list[Any]) -> None:
        self._last_seq = max(self._last_seq, rows[-1][0])
        if self._size == 0:
            self._words = len(rows[0][2]) // WORD_BYTES
        # Codes of another width come from another model: reindex removes them.
        kept = [r for r in rows if len(r[2]) == self._words * WORD_BYTES]
        self._skipped += len(rows) - len(kept)
        rows, count = kept, len(kept)
        if not count:
            return
        codes = np.frombuffer(b''.join(r[2] for r in rows), dtype=np.uint64)
        self._reserve(self._size + count)
        end = self._size + count
        part = slice(self._size, end)
        self._codes[part] = codes.reshape(count, self._words)
        self._seqs[part] = [r[0] for r in rows]
        self._ids[part] = [r[1] for r in rows]
        self._coll[part] = self._codes_of('collection', [r[3] for r in rows])
        self._sess[part] = self._codes_of('session', [r[4] for r in rows])
        self._fact[part] = [bool(r[5]) for r in rows]
        self._ctx[part] = _filter_ids([r[7] for r in rows])
        self._alive[part] = True
        if self._int8_on:
            self._copy_int8([r[6] for r in rows], part)
        self._size = end

    def _copy_int8(self, blobs: list[bytes | None], part: slice) -> None:
        """Quantize the floats of positions ``part`` into the 8-bit copy, or drop the copy."""
        if part.stop > self._int8_max:
            LOG.info('vector index: %d vectors, over int8_max_vectors (%d); the 8-bit copy is '
                     'dropped and candidates are rescored from SQLite alone', part.stop,
                     self._int8_max)
            self._int8_on = False
            self._q8 = np.zeros((0, 0), dtype=np.int8)
            self._q8_scale = np.zeros(0, dtype=np.float32)
            return
        self._dim = self._dim or next((len(b) // 4 for b in blobs if b), 0)
        if len(self._q8) < part.stop or self._q8.shape[1] != self._dim:
            new = max(part.stop, int(len(self._q8) * GROW), 1024)
            copy = np.zeros((new, self._dim), dtype=np.int8)
            scale = np.zeros(new, dtype=np.float32)  # rows of another width: scale 0, unknown
            if self._q8.shape[1] == self._dim:
                copy[:part.start] = self._q8[:part.start]
                scale[:part.start] = self._q8_scale[:part.start]
            self._q8, self._q8_scale = copy, scale
        self._q8[part], self._q8_scale[part] = _quantized(blobs, self._dim)

    def _codes_of(self, kind: str, values: list[str]) -> np.ndarray:
        """
        Small integer codes of names, a dict lookup per row.

        np.unique over the names sorted the strings: 24-29 ms per 50 000 rows against 4 ms,
        about 1 s of a cold start at 1M.
        """
        names = self._names[kind]
        return np.fromiter((names[name] if name in names
                            else names.setdefault(name, len(names) + 1) for name in values),
                           dtype=np.int32, count=len(values))

    def _reserve(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity and self._codes.shape[1] == self._words:
            return
        new = max(needed, int(capacity * GROW), 1024)
        codes = np.zeros((new, self._words), dtype=np.uint64)
        if self._codes.shape[1] == self._words:
            codes[:self._size] = self._codes[:self._size]
        self._codes = codes
        for attr in ('_ids', '_seqs', '_coll', '_sess', '_fact', '_alive', '_ctx'):
            old = getattr(self, attr)
            # Fortran order: each path's filter ids contiguous (_select reads one path of every
            # row; in row order the compare strides 20 bytes a row, 3.3 against 0.3 ms at 1M).
            grown = np.zeros((new, *old.shape[1:]), dtype=old.dtype, order='F')
            grown[:self._size] = old[:self._size]
            setattr(self, attr, grown)

    # --- the approximate stage ------------------------------------------------------------

    def _keep_ann(self) -> None:
        """Add the positions loaded since to the stage; start a (re)build when one is due."""
        ann = self._ann
        if ann is not None and ann.size < self._size:
            self._extend(ann, self._reader())
        building = self._ann_builder is not None and self._ann_builder.is_alive()
        due = (self._size >= self._ann_min if ann is None
               else self._size >= ANN_REBUILD_GROWTH * ann.trained_for)
        if due and not building and not self._ann_error and not self._stopping:
            self._ann_builder = threading.Thread(target=self._build, args=(self._generation,),
                                                 name='robotmem-ann-build', daemon=True)
            self._ann_builder.start()

    def _extend(self, ann: ann_stage.AnnStage, conn: Any) -> None:
        """
        Append the floats of positions ``ann.size .. size - 1`` (in blocks).

        Only the new positions' seqs are copied: a learn adds one, and copying all of them
        was 8 MB and about 0.5 ms of every learn at 1M.
        """
        with self._lock:
            seqs = self._seqs[ann.size:self._size].copy()
        for block in self._blocks(conn, seqs, 0, len(seqs), ann.dim):
            with self._ann_lock:
                ann.add(block)
        self._appended += len(seqs)
        if self._appended >= TRIM_APPENDS:
            self._appended = 0
            heap.return_freed()

    def _build(self, generation: int) -> None:
        """Train and fill a stage over the positions held now, then swap it in (a thread)."""
        conn = None
        try:
            conn = self._opener()
            with self._lock:
                if generation != self._generation:
                    return  # reset since the build was started: these positions are gone
                seqs = self._seqs[:self._size].copy()
            stage = ann_stage.build(
                len(seqs), self._ann_nprobe,
                lambda positions: self._sample(conn, seqs, positions),
                lambda start, end, dim: self._blocks(conn, seqs, start, end, dim))
            with self._refresh_lock:
                if generation != self._generation or self._stopping:
                    return
                self._extend(stage, conn)
                self._ann = stage
        except Exception as exc:  # noqa: BLE001 - the scan keeps answering; say why once
            if self._stopping or generation != self._generation:
                return  # the store closed or was reset under the build: nothing to report
            error = f'{type(exc).__name__}: {exc}'
            LOG.warning('vector index: the approximate stage could not be built (%s); the '
                        'sign-bit scan keeps answering', error)
            self._ann_error = error  # after the log: whoever sees the error finds the record
        finally:
            if conn is not None:
                conn.close()

    def _blocks(self, conn: Any, seqs: np.ndarray, start: int, end: int,
                dim: int) -> Iterator[np.ndarray]:
        """Float vectors of positions ``start .. end - 1`` in blocks; a missing row is zeros."""
        for lo in range(start, end, ANN_BLOCK):
            hi = min(lo + ANN_BLOCK, end)
            rows = vector_store.embeddings_between(conn, int(seqs[lo]), int(seqs[hi - 1]))
            yield self._placed(rows, seqs[lo:hi], dim)

    def _sample(self, conn: Any, seqs: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Float vectors of the given positions; their dimension is the first stored one's."""
        wanted = seqs[positions]
        rows = [row for lo in range(0, len(wanted), SAMPLE_CHUNK)
                for row in vector_store.embeddings_of_seqs(
                    conn, wanted[lo:lo + SAMPLE_CHUNK].tolist())]
        if not rows:
            raise ValueError('no float vectors stored for a sample of the index')
        return self._placed(rows, wanted, len(rows[0][1]) // 4)

    def _placed(self, rows: list[Any], seqs: np.ndarray, dim: int) -> np.ndarray:
        """Rows of (seq, blob) put at the index of their seq in ``seqs`` (sorted)."""
        if self._stopping:
            raise RuntimeError('the store is closing')
        out = np.zeros((len(seqs), dim), dtype=np.float32)
        rows = [r for r in rows if len(r[1]) == 4 * dim]  # another model's: reindex removes
        if rows:
            at = np.searchsorted(seqs, [r[0] for r in rows])
            out[at] = np.frombuffer(b''.join(r[1] for r in rows), dtype='<f4').reshape(-1, dim)
        return out

    # --- search ------------------------------------------------------------------------

    def search(self, conn: Any, vector: np.ndarray, collection: str, k: int, *,
               session_id: str = '', type_: str = '', exclude_session: str = '',
               context: Sequence[tuple[int, int]] = (),
               where: tuple[str, list[Any]] = ('', [])) -> list[tuple[int, float]]:
        """
        Nearest active memories by cosine, filtered before ranking; returns (id, cosine).

        ``conn`` is the connection whose view decides what exists (the writer inside a learn,
        a reader for recall); the index itself only proposes candidates. ``context`` holds
        (position in schema.CONTEXT_PATHS, value id) pairs tested on the index's
        arrays; ``where`` adds SQL conditions on ``memories m`` that candidates must meet; the
        pool grows until ``k`` meet them or none are left. The rows ``conn``'s own open
        transaction stored are candidates too (``_unheld``).
        """
        self.refresh()
        found = self._held(conn, vector, collection, k, session_id, type_, exclude_session,
                           context, where)
        found.update(self._unheld(conn, vector, collection, session_id, type_, exclude_session,
                                  context, where))
        return _best(found, k)

    def _held(self, conn: Any, vector: np.ndarray, collection: str, k: int, session_id: str,
              type_: str, exclude_session: str, context: Sequence[tuple[int, int]],
              where: tuple[str, list[Any]]) -> dict[int, float]:
        """Exact cosines of at least the ``k`` nearest rows the index holds (all if fewer)."""
        with self._lock:
            # A count, not the positions: at 1M, np.flatnonzero took 0.8 ms of every search
            # that the approximate stage answers, which needs the mask alone.
            selection = self._select(collection, session_id, type_, exclude_session, context)
            mask, selected_count = selection.bits[:selection.size], selection.count
            query = np.frombuffer(code_of(vector), dtype=np.uint64)
            # Held rows of another width: another model's, loaded before the engine saw the
            # store change models (it resets the index when it does): none is this query's.
            if selected_count == 0 or query.size != self._words:
                return {}
            codes = self._codes
            rescore = functools.partial(
                self._best_first, conn, vector, self._ids, self._seqs,
                (self._q8, self._q8_scale) if self._int8_on else None, k, where)
            # Not with SQL conditions (context equalities on paths without filter ids): the
            # stage cannot test them, and the nearest few of the whole set rarely meet a
            # selective one (measured: +50 ms at 1M). Filter ids are in the mask it tests.
            ann, bitmap = self._ann, None
            if ann is not None and selected_count > RESCORE_MIN and not where[0]:
                bitmap = selection.bitmap()
        if bitmap is not None:
            with self._ann_lock:
                rows = ann.search(vector, bitmap, selected_count, mask.size,
                                  max(ANN_CANDIDATES, 2 * k))
            found: dict[int, float] = {}
            rescore(rows, found)
            if len(found) >= k:
                return found
        selected = np.flatnonzero(mask)
        distance = _hamming(codes, query, int(selected[-1]) + 1)[selected]
        pool = max(RESCORE_MIN, RESCORE_PER_K * k, int(selected.size * RESCORE_SHARE))
        found = {}
        for batch in _nearest_first(distance, pool):
            rescore(selected[batch], found)
            if len(found) >= k:
                break
        return found

    def _unheld(self, conn: Any, vector: np.ndarray, collection: str, session_id: str,
                type_: str, exclude_session: str, context: Sequence[tuple[int, int]],
                where: tuple[str, list[Any]]) -> dict[int, float]:
        """
        Exact cosines of the rows past the index's that ``conn`` sees and the filters pass.

        The index loads committed rows, through a reader: a writer whose open transaction
        stored vectors (a fleet pull of several facts, a learn inside a larger write) would not
        find them. A connection outside a transaction sees no row the refresh did not load.
        """
        if not conn.in_transaction:
            return {}
        width, after, found = len(code_of(vector)), self._last_seq, {}
        while rows := vector_store.codes_since(conn, after, LOAD_CHUNK):
            after = rows[-1][0]
            kept = [r for r in rows if len(r[2]) == width and r[3] == collection
                    and (not session_id or r[4] == session_id)
                    and (not type_ or bool(r[5]) == (type_ != 'perception'))
                    and (not exclude_session or r[4] != exclude_session)]
            ids = _filter_ids([r[7] for r in kept])
            kept = [r for r, row_ids in zip(kept, ids)
                    if all(row_ids[column] == value_id for column, value_id in context)]
            if kept:
                found.update(self._rescore(conn, vector, np.array([r[1] for r in kept]),
                                           np.array([r[0] for r in kept]), where))
            if len(rows) < LOAD_CHUNK:
                break
        return found

    def ids_holding(self, collection: str,
                    context: Sequence[tuple[int, int]]) -> np.ndarray | None:
        """
        Ids of the memories of ``collection`` whose filter ids match ``context`` (all held).

        None while rows of another code width are left out (a model change before its
        reindex): their memories would be missing, so the caller must not rely on the set.
        """
        self.refresh()
        with self._lock:
            if self._skipped:
                return None
            selection = self._select(collection, '', '', '', context)
            return self._ids[:self._size][selection.bits[:selection.size]].copy()

    def _select(self, collection: str, session_id: str, type_: str, exclude_session: str,
                context: Sequence[tuple[int, int]]) -> _Mask:
        """
        Return the kept mask of the positions that pass the filters, brought up to date.

        Alive, in the collection, and the other filters given; the caller holds the lock. A kept
        mask is reused and its buffer extended in place past the positions it covers; its
        ``bits[:size]``, taken under the lock, are never written again (a change of held
        positions starts a new buffer), so a caller may read them after the lock is released.
        """
        key = (collection, session_id, type_, exclude_session, tuple(context))
        size = self._size
        kept = self._masks.pop(key, None)
        if kept is None or kept.changes != self._changes or kept.size > size:
            kept = _Mask(np.zeros(size + MASK_SLACK, dtype=bool), 0, 0, self._changes)
        elif len(kept.bits) < size:
            bits = np.zeros(size + MASK_SLACK, dtype=bool)
            bits[:kept.size] = kept.bits[:kept.size]
            kept.bits = bits
        if kept.size < size:
            part = slice(kept.size, size)
            tail = kept.bits[part]
            tail[:] = self._mask_of(part, collection, session_id, type_, exclude_session,
                                    context)
            kept.count += int(np.count_nonzero(tail))
            kept.size = size
        self._masks[key] = kept
        while len(self._masks) > MASKS_KEPT:
            self._masks.popitem(last=False)
        return kept

    def _mask_of(self, part: slice, collection: str, session_id: str, type_: str,
                 exclude_session: str, context: Sequence[tuple[int, int]]) -> np.ndarray:
        """Test the filters of ``_select`` on the positions ``part``."""
        code = self._names['collection'].get(collection)
        if code is None:
            return np.zeros(part.stop - part.start, dtype=bool)
        mask = self._alive[part] & (self._coll[part] == code)
        if session_id:
            mask &= self._sess[part] == self._names['session'].get(session_id, -1)
        if type_:
            mask &= self._fact[part] == (type_ != 'perception')
        if exclude_session and exclude_session in self._names['session']:
            mask &= self._sess[part] != self._names['session'][exclude_session]
        for column, value_id in context:
            mask &= self._ctx[part, column] == value_id
        return mask

    def _best_first(self, conn: Any, vector: np.ndarray, ids: np.ndarray, seqs: np.ndarray,
                    copy: tuple[np.ndarray, np.ndarray] | None, k: int,
                    where: tuple[str, list[Any]], rows: np.ndarray,
                    found: dict[int, float]) -> None:
        """
        Add the exact cosines of those candidates ``rows`` that can reach the top ``k``.

        Without the 8-bit ``copy`` (codes, scales), or with SQL conditions ``where``, every
        candidate is rescored in one read: a selective filter fails most candidates, so reading
        best first cost more statements and saved no rows (measured). With the copy, the
        estimate of each cosine is off by at most half its scale times the query's L1 norm, so
        candidates are read in order of that upper bound, and reading stops once the next bound
        is below the k-th cosine found: no unread candidate can enter the top ``k``.
        """
        if copy is None or where[0] or rows.size == 0 or int(rows.max()) >= len(copy[1]):
            found.update(self._rescore(conn, vector, ids[rows], seqs[rows], where))
            return
        query = np.asarray(vector, dtype=np.float32)
        codes, scale = copy[0][rows], copy[1][rows]
        bound = scale * (0.5 * float(np.abs(query).sum())) + ROUNDING_SLACK
        upper = np.where(scale > 0, (codes @ query) * scale + bound, np.inf)
        order = np.argsort(-upper, kind='stable')
        start, step = 0, max(2 * k, BEST_FIRST_STEP)
        while start < order.size:
            part = rows[order[start:start + step]]
            found.update(self._rescore(conn, vector, ids[part], seqs[part], where))
            start, step = start + step, 2 * step  # doubling: few reads when many are stale
            if (start < order.size and len(found) >= k
                    and upper[order[start]] < heapq.nlargest(k, found.values())[-1]):
                return

    def _rescore(self, conn: Any, vector: np.ndarray, ids: np.ndarray, seqs: np.ndarray,
                 where: tuple[str, list[Any]]) -> dict[int, float]:
        """Exact cosine of candidates that still hold that vector and are still active."""
        wanted = set(zip(ids.tolist(), seqs.tolist()))
        unique = sorted({memory_id for memory_id, _ in wanted})
        rows = vector_store.active_embeddings(conn, unique, where)
        live = [r for r in rows if (r[0], r[1]) in wanted]
        if not live:
            return {}
        matrix = np.frombuffer(b''.join(r[2] for r in live), dtype='<f4').reshape(len(live), -1)
        sims = matrix @ np.asarray(vector, dtype=np.float32)
        return {r[0]: float(s) for r, s in zip(live, sims)}

    def stats(self) -> dict[str, Any]:
        """Entries held, bytes of the arrays and the approximate stage (status, benchmarks)."""
        with self._lock:
            live = int(self._alive[:self._size].sum())
            nbytes = sum(getattr(self, a).nbytes for a in
                         ('_codes', '_ids', '_seqs', '_coll', '_sess', '_fact', '_alive',
                          '_ctx'))
            int8_bytes = self._q8.nbytes + self._q8_scale.nbytes
        ann = self._ann
        building = self._ann_builder is not None and self._ann_builder.is_alive()
        return {'entries': self._size, 'live': live, 'bytes': nbytes, 'int8_bytes': int8_bytes,
                'ann_entries': ann.size if ann is not None else 0,
                'ann_bytes': ann.nbytes() if ann is not None else 0,
                'ann_building': building, 'ann_error': self._ann_error,
                'snapshot_restored': self._restored, 'snapshot_saved': self._saved_size}


@dataclass
class _Mask:
    """A selection's mask: ``bits[:size]`` hold it, ``count`` of them set, as of ``changes``."""

    bits: np.ndarray
    size: int
    count: int
    changes: int
    packed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    packed_size: int = 0

    def bitmap(self) -> np.ndarray:
        """
        ``bits[:size]`` eight to a byte for the approximate stage (ann_stage.pack), kept too.

        Only the bytes from the last one packed on are packed again: packing a 1M-position
        mask whole took 0.07 ms of every search at 1M that the stage answers. A bitmap returned
        earlier may see its last byte gain the bits of positions appended since; the stage
        returns no position past the size its search was asked with (AnnStage.search).
        """
        whole = -(-self.size // 8)
        if len(self.packed) < whole:
            grown = np.zeros(whole + MASK_SLACK // 8, dtype=np.uint8)
            grown[:len(self.packed)] = self.packed
            self.packed = grown
        start = self.packed_size // 8
        self.packed[start:whole] = ann_stage.pack(self.bits[start * 8:self.size])
        self.packed_size = self.size
        return self.packed[:whole]


def _save(path: pathlib.Path, snapshot: index_snapshot.Snapshot) -> None:
    """Write a snapshot (a thread); a failure only costs the next start its full load."""
    began = time.perf_counter()
    try:
        index_snapshot.save(path, snapshot)
    except Exception as exc:  # noqa: BLE001 - nothing depends on the file but a start's speed
        LOG.warning('vector index: snapshot %s not written (%s: %s); the next start reads '
                    'every vector from the store', path, type(exc).__name__, exc)
        return
    LOG.info('vector index: %d vectors saved to %s in %.2f s', snapshot.size, path,
             time.perf_counter() - began)


def _best(found: dict[int, float], k: int) -> list[tuple[int, float]]:
    """Return the ``k`` highest cosines, ties by id (the same order as an exact scan)."""
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))[:k]


def _quantized(blobs: list[bytes | None], dim: int,
               levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """
    8-bit codes and scales of float vectors (code x scale is within scale / 2 of each float).

    Codes run from -``levels`` to ``levels``; fewer levels only loosen the bounds (tests).

    A vector that is missing or of another width gets scale 0: its estimate is unknown, so
    best-first rescoring always reads it.
    """
    codes = np.zeros((len(blobs), dim), dtype=np.int8)
    scale = np.zeros(len(blobs), dtype=np.float32)
    good = [i for i, blob in enumerate(blobs) if blob and len(blob) == 4 * dim]
    if good:
        floats = np.frombuffer(b''.join(blobs[i] for i in good), dtype='<f4').reshape(-1, dim)
        top = np.abs(floats).max(axis=1)
        step = np.where(top > 0, top / levels, 1.0).astype(np.float32)
        codes[good] = np.rint(floats / step[:, None])
        scale[good] = step
    return codes, scale


def _filter_ids(blobs: list[bytes | None]) -> np.ndarray:
    """Filter ids of rows (schema.CONTEXT_PATHS); a row without them matches no filter."""
    width = 4 * len(CONTEXT_PATHS)
    empty = bytes(width)
    packed = b''.join(blob if blob and len(blob) == width else empty for blob in blobs)
    return np.frombuffer(packed, dtype='<i4').reshape(len(blobs), len(CONTEXT_PATHS))


def _hamming(codes: np.ndarray, query: np.ndarray, rows: int) -> np.ndarray:
    """Hamming distance of the first ``rows`` codes to ``query``, one 64-bit word at a time."""
    distance = np.zeros(rows, dtype=np.uint16)
    for word in range(codes.shape[1]):
        distance += np.bitwise_count(codes[:rows, word] ^ query[word])
    return distance


def _nearest_first(distance: np.ndarray, pool: int) -> Iterator[np.ndarray]:
    """
    Yield positions by increasing distance, ties by position: the best ``pool``, then batches.

    Most searches stop after the first batch, so only its few are sorted. The distances are
    bit counts, a few hundred values at most: counting each value gives the distance of the
    ``pool``-th nearest, and the positions up to it are found in one pass (0.03 ms at 18 000
    positions where np.argpartition took 0.08, 0.13 against 0.79 at 100 000).
    """
    if distance.size <= pool:
        yield np.argsort(distance, kind='stable')
        return
    cut = int(np.searchsorted(np.cumsum(np.bincount(distance)), pool))
    within = distance <= cut
    near = np.flatnonzero(within)
    near = near[np.argsort(distance[near], kind='stable')]
    yield near[:pool]
    others = np.flatnonzero(~within)
    order = np.concatenate([near[pool:], others[np.argsort(distance[others], kind='stable')]])
    for start in range(0, order.size, pool * 4):
        yield order[start:start + pool * 4]
