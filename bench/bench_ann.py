"""
Candidates for the vector index's first pass (issue 15), measured side by side on one machine.

Same vectors as bench/bench_scale.py (its generator is imported, not copied): the real model
embeds a pool of synthetic memories, memory ``i`` is pool vector ``i mod pool`` plus seeded
noise, so a big store holds families of near-duplicates. Queries are the real model's vectors
of bench/datagen.py queries. Each candidate answers k=10 unfiltered and filtered to a 1 % and a
10 % subset (a session, as the engine filters), and its answer is compared with an exact float
scan of the same subset (recall@10).

Every approximate candidate ends as the engine does: the float vectors of its best ``rescore``
candidates are read from a real SQLite store (``memory_embeddings``, float32 BLOBs, by the
engine's own ``vector_store.active_embeddings``) and ranked exactly; that read is inside the
timed search and also reported on its own. ``signbit`` is today's engine (``VectorIndex``) on
that same store. Graph indexes that build too slowly stop at ``--build-cap-s``: the row says
how many vectors they hold and the build rate, and their recall is against the vectors held.

Search runs on one thread (a node shares its cores); builds may use all of them. Results go to
bench/results/ann_candidates.json (rewritten after every size). Needs requirements/bench-ann.txt
(faiss-cpu, usearch, hnswlib); a candidate whose package is missing is skipped and said so.

Usage::

    nice -n 10 python bench/bench_ann.py --sizes 10000,100000,1000000
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import pathlib
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

import numpy as np

from bench_scale import _pool, _vectors, FILL_CHUNK  # noqa: I100,I201
from common import latency_summary, print_table, RESULTS_DIR, rss_mb, write_result  # noqa: I100
import datagen  # noqa: I100,I201

K = 10
FILTERS = {'all': 1.0, '10%': 0.10, '1%': 0.01}
ADDS = 200


# --- data: vectors, filters, exact answers, the SQLite store ---------------------------------

class Data:
    """Vectors of one size, their filter column, queries and the exact top 10 per filter."""

    def __init__(self, pool: np.ndarray, size: int, queries: np.ndarray, seed: int) -> None:
        self.size = size
        self.vectors = _vectors(pool, 0, size, seed)
        self.extra = _vectors(pool, size, ADDS, seed)  # added one at a time after searching
        self.queries = queries
        # Disjoint subsets by a seeded draw: session 1 holds 1 %, session 2 holds 10 %.
        draw = np.random.default_rng(seed + 101).random(size)
        self.session = np.where(draw < 0.01, 1, np.where(draw < 0.11, 2, 0)).astype(np.int8)
        self.codes = {'all': -1, '10%': 2, '1%': 1}
        self.truth = {name: self.exact(name, size) for name in FILTERS}

    def mask(self, name: str) -> np.ndarray | None:
        """Rows a filter keeps (None: all); what an index holding a filter column computes."""
        code = self.codes[name]
        return None if code < 0 else self.session == code

    def exact(self, name: str, held: int) -> np.ndarray:
        """Rows of the exact top k of each query among the first ``held`` rows, best first."""
        mask = self.mask(name)
        best = np.zeros((len(self.queries), 0), dtype=np.int64)
        best_s = np.zeros((len(self.queries), 0), dtype=np.float32)
        for start in range(0, held, 100_000):
            end = min(start + 100_000, held)
            scores = self.queries @ self.vectors[start:end].T
            if mask is not None:
                scores[:, ~mask[start:end]] = -np.inf
            rows = np.argpartition(-scores, K, axis=1)[:, :K]
            best = np.hstack([best, rows + start])
            best_s = np.hstack([best_s, np.take_along_axis(scores, rows, axis=1)])
        order = np.argsort(-best_s, axis=1)[:, :K]
        rows = np.take_along_axis(best, order, axis=1)
        rows[np.take_along_axis(best_s, order, axis=1) == -np.inf] = -1  # subset smaller than k
        return rows


def build_store(path: pathlib.Path, data: Data) -> Any:
    """
    Build a real engine store holding every vector as the engine's ``put_vector`` writes it.

    Rows go in by ``executemany`` in big transactions (the same columns ``put_vector`` fills:
    sign-bit code in ``memory_vectors``, float32 BLOB in ``memory_embeddings``); the fill is not
    what is measured. Memory id = row + 1.
    """
    from robotmem_ros.engine import schema, store
    from robotmem_ros.engine.database import Database
    from robotmem_ros.engine.vector_index import code_of, to_blob
    db = Database(path)
    now = time.time()
    with db.write() as conn:
        schema.migrate(conn)
        for sid in ('s1', 's2'):
            store.ensure_session(conn, sid, 'main', now)
    names = {0: None, 1: 's1', 2: 's2'}
    for start in range(0, data.size, FILL_CHUNK):
        rows = range(start, min(start + FILL_CHUNK, data.size))
        with db.write() as conn:
            conn.executemany(
                'INSERT INTO memories(id, type, content, content_hash, collection, session_id, '
                "confidence, created_at, valid_from, embedded) VALUES (?, 'fact', ?, ?, 'main', "
                '?, 0.5, ?, ?, 1)',
                [(r + 1, f'm{r}', f'h{r}', names[int(data.session[r])], now, now) for r in rows])
            conn.executemany(
                'INSERT INTO memory_vectors(memory_id, collection, session_id, is_fact, code) '
                "VALUES (?, 'main', ?, 1, ?)",
                [(r + 1, names[int(data.session[r])] or '', code_of(data.vectors[r]))
                 for r in rows])
            conn.executemany('INSERT INTO memory_embeddings(memory_id, embedding) VALUES (?, ?)',
                             [(r + 1, to_blob(data.vectors[r])) for r in rows])
    db.reader().execute('PRAGMA wal_checkpoint(TRUNCATE)')
    return db


def rescore(conn: Any, query: np.ndarray, rows: np.ndarray, clock: list[float]) -> list[int]:
    """Exact top k of candidate rows, their floats read from SQLite as the engine reads them."""
    from robotmem_ros.engine import vector_store
    started = time.perf_counter()
    ids = sorted({int(r) + 1 for r in rows if r >= 0})
    found = vector_store.active_embeddings(conn, ids, ('', [])) if ids else []
    clock.append((time.perf_counter() - started) * 1000.0)
    if not found:
        return []
    matrix = np.frombuffer(b''.join(r[2] for r in found), dtype='<f4').reshape(len(found), -1)
    sims = matrix @ query
    order = np.argsort(-sims, kind='stable')[:K]
    return [found[i][0] - 1 for i in order]


# --- candidates ------------------------------------------------------------------------------

class Candidate:
    """One first-pass index: build, search (then rescoring), add one, save/load, its size."""

    name = ''
    package = ''
    filter_api = ''
    rescore_n = 0
    needs_rescore = True

    def __init__(self, data: Data, db: Any, args: argparse.Namespace) -> None:
        self.data, self.db, self.args = data, db, args
        self.held = data.size  # vectors in the index (a capped graph build holds fewer)
        self.notes: list[str] = []

    def build(self) -> None:
        """Train and fill the index with every vector (or as many as the cap allows)."""
        raise NotImplementedError

    def candidates(self, query: np.ndarray, filt: str) -> np.ndarray:
        """Rows proposed for rescoring (-1 = empty slot)."""
        raise NotImplementedError

    def search(self, query: np.ndarray, filt: str, clock: list[float]) -> list[int]:
        """Top k rows of the filtered set, exact floats deciding where the index is lossy."""
        rows = self.candidates(query, filt)
        if not self.needs_rescore:
            return [int(r) for r in rows[:K] if r >= 0]
        return rescore(self.db.reader(), query, rows, clock)

    def add_one(self, row: int, vector: np.ndarray) -> None:
        """Learn one more vector (incremental, no retraining)."""
        raise NotImplementedError

    def nbytes(self) -> int:
        """Return the index's own size in RAM, in bytes."""
        raise NotImplementedError

    def save(self, path: pathlib.Path) -> None:
        """Write the index to a file."""
        raise NotImplementedError

    def load(self, path: pathlib.Path) -> None:
        """Replace the index by the one in a file (what a cold start with a saved index pays)."""
        raise NotImplementedError

    def settings(self) -> list[str]:
        """Search settings to measure (HNSW breadth, IVF lists probed); '' = the only one."""
        return ['']

    def use(self, setting: str) -> None:
        """Switch to one of ``settings()`` (no rebuild)."""

    def mask(self, filt: str) -> np.ndarray | None:
        """Filter of the rows the index holds."""
        mask = self.data.mask(filt)
        return None if mask is None else mask[:self.held]

    def _capped_add(self, add: Callable[[int, int], None]) -> None:
        """Add in batches until all are in or the build cap is spent; record the rate."""
        started = time.perf_counter()
        step = 10_000
        done = 0
        while done < self.data.size:
            end = min(done + step, self.data.size)
            add(done, end)
            done = end
            if time.perf_counter() - started > self.args.build_cap_s and done < self.data.size:
                rate = done / (time.perf_counter() - started)
                self.notes.append(
                    f'build capped at {self.args.build_cap_s:.0f} s: {done} of '
                    f'{self.data.size} vectors in, {rate:.0f} vectors/s; all would take '
                    f'>= {self.data.size / rate:.0f} s (graph inserts slow down with size)')
                break
        self.held = done


class SignBit(Candidate):
    """Today's engine: VectorIndex over the store (sign bits, masks, SQLite float rescoring)."""

    name = 'signbit (engine today)'
    filter_api = 'yes (numpy masks on collection/session/type columns)'
    needs_rescore = False  # the engine's search rescoring is part of its own search

    def build(self) -> None:
        from robotmem_ros.engine.vector_index import VectorIndex
        self.index = VectorIndex(self.db.reader)
        self.index.refresh()
        self.rescore_n = max(256, int(self.data.size * 1 / 400))

    def search(self, query: np.ndarray, filt: str, clock: list[float]) -> list[int]:
        session = {'all': '', '10%': 's2', '1%': 's1'}[filt]
        found = self.index.search(self.db.reader(), query, 'main', K, session_id=session)
        return [memory_id - 1 for memory_id, _ in found]

    def add_one(self, row: int, vector: np.ndarray) -> None:
        self.index.refresh()  # the row was committed by the writer before (not timed)

    def nbytes(self) -> int:
        return self.index.stats()['bytes']

    def save(self, path: pathlib.Path) -> None:
        pass  # nothing to save: SQLite is the file

    def load(self, path: pathlib.Path) -> None:
        from robotmem_ros.engine.vector_index import VectorIndex
        self.index = VectorIndex(self.db.reader)
        self.index.refresh()


class FaissCandidate(Candidate):
    """faiss-cpu indexes with an IDSelectorBitmap filter passed in SearchParameters."""

    package = 'faiss'
    filter_api = 'yes (IDSelectorBitmap in SearchParameters, applied during the scan)'
    knob = ('', '')  # (setting's label, SearchParameters field) swept; none by default

    def knob_values(self) -> list[int]:
        """Values of the swept search parameter, the first one used after the build."""
        return []

    def settings(self) -> list[str]:
        return [f'{self.knob[0]}={value}' for value in self.knob_values()] or ['']

    def use(self, setting: str) -> None:
        if setting:
            self.search_kwargs[self.knob[1]] = int(setting.split('=')[1])

    def _ready(self, rescore_n: int, params_class: Any) -> None:
        """End a build: how many floats to rescore, the search parameters, the first setting."""
        values = self.knob_values()
        self.rescore_n = rescore_n
        self.params_class = params_class
        self.search_kwargs = {self.knob[1]: values[0]} if values else {}
        self._searching()

    def _params(self, filt: str) -> Any:
        import faiss
        mask = self.mask(filt)
        kwargs = dict(self.search_kwargs)
        if mask is not None:
            self._bits = np.packbits(mask, bitorder='little')  # kept alive during search
            kwargs['sel'] = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(self._bits))
        return self.params_class(**kwargs)

    def candidates(self, query: np.ndarray, filt: str) -> np.ndarray:
        _, rows = self.index.search(query[None, :], self.rescore_n or K,
                                    params=self._params(filt))
        return rows[0]

    def add_one(self, row: int, vector: np.ndarray) -> None:
        self.index.add(vector[None, :])

    def nbytes(self) -> int:
        import faiss
        return int(faiss.serialize_index(self.index).size)

    def save(self, path: pathlib.Path) -> None:
        import faiss
        faiss.write_index(self.index, str(path))

    def load(self, path: pathlib.Path) -> None:
        import faiss
        self.index = faiss.read_index(str(path))
        self._searching()

    def _train_sample(self, least: int = 0) -> np.ndarray:
        """
        Draw a seeded training sample: ``--train`` rows, at least ``least`` (40 per IVF list).

        PQ48np: no polysemous training (faiss's default for "PQ48" spends minutes on it).
        """
        count = min(self.data.size, max(self.args.train, least))
        rows = np.random.default_rng(7).choice(self.data.size, count, replace=False)
        return self.data.vectors[np.sort(rows)]

    def _searching(self) -> None:
        import faiss
        faiss.omp_set_num_threads(1)

    def _building(self) -> None:
        import faiss
        faiss.omp_set_num_threads(self.args.build_threads)


class FaissPQ(FaissCandidate):
    """
    Exhaustive scan of 48 one-byte PQ codes per vector (as many bytes as the sign bits).

    faiss's IndexPQ rejects a selector ("selector not supported"), so the same full PQ scan is
    built as IVF1,PQ48 (one list, always probed), whose search applies IDSelectorBitmap.
    """

    name = 'faiss PQ48 full scan'

    def build(self) -> None:
        import faiss
        self._building()
        self.index = faiss.index_factory(self.data.vectors.shape[1], 'IVF1,PQ48np',
                                         faiss.METRIC_INNER_PRODUCT)
        self.index.train(self._train_sample())
        self.index.add(self.data.vectors)
        self.rescore_n = self.args.rescore_pq
        self.params_class = faiss.SearchParametersIVF
        self.search_kwargs: dict[str, Any] = {'nprobe': 1}
        self.notes.append('IndexPQ rejects IDSelector in search (faiss: selector not '
                          'supported); the identical full PQ scan is run as IVF1,PQ48np')
        self._searching()


class FaissIVFPQ(FaissCandidate):
    """IVF (sqrt N lists) + PQ 48x8 codes: scans nprobe lists only."""

    name = 'faiss IVF+PQ48'
    knob = ('nprobe', 'nprobe')
    refine = ''  # scalar codes that re-rank the PQ candidates in RAM (subclasses); '' = none

    def build(self) -> None:
        import faiss
        self._building()
        nlist = max(16, int(math.sqrt(self.data.size)))
        stage = f',Refine({self.refine})' if self.refine else ''
        self.name = f'faiss IVF{nlist},PQ48{stage}'
        self.index = faiss.index_factory(self.data.vectors.shape[1], f'IVF{nlist},PQ48np{stage}',
                                         faiss.METRIC_INNER_PRODUCT)
        self.index.train(self._train_sample(40 * nlist))
        self.index.add(self.data.vectors)
        self._ready(self.args.rescore_graph if self.refine else self.args.rescore_pq,
                    faiss.SearchParametersIVF)

    def knob_values(self) -> list[int]:
        return self.args.nprobes


class FaissIVFPQRefine(FaissIVFPQ):
    """
    IVF-PQ48 first pass, then its best ``--refine-pool`` re-ranked in RAM by finer codes.

    faiss's IndexRefine: the PQ codes propose, scalar-quantized codes (SQ8: 384 B, SQ4: 192 B
    per vector) re-rank, and only the best ``--rescore-graph`` floats are read from SQLite.
    """

    refine = 'SQ8'

    def _params(self, filt: str) -> Any:
        import faiss
        self._base = super()._params(filt)  # kept alive: the refine parameters point to it
        return faiss.IndexRefineSearchParameters(
            k_factor=self.args.refine_pool / self.rescore_n, base_index_params=self._base)


class FaissIVFPQRefineSQ4(FaissIVFPQRefine):
    """The same with 4-bit refine codes (half the RAM)."""

    refine = 'SQ4'


class FaissIVFPQRefineSQ6(FaissIVFPQRefine):
    """The same with 6-bit refine codes (between the two)."""

    refine = 'SQ6'


class EngineStage(Candidate):
    """
    The engine's own approximate stage (engine/ann_stage.py), built and searched as it is.

    IVF with sqrt(N) lists of 4-bit fast-scan codes, one code per vector (the refine candidates
    above hold two: PQ codes to propose, SQ codes to re-rank); the lists probed grow with the
    filter's selectivity, and the engine's ``ANN_CANDIDATES`` floats are rescored. The engine
    keeps no index file: "load" is the rebuild a start pays.
    """

    package = 'faiss'
    filter_api = 'yes (IDSelectorBitmap; lists probed scaled by the share the filter keeps)'

    def build(self) -> None:
        from robotmem_ros.engine import ann_stage, vector_index
        vectors, step = self.data.vectors, vector_index.ANN_BLOCK  # the engine's blocks
        self.index = ann_stage.build(
            len(vectors), self.args.nprobes[0], lambda rows: vectors[rows],
            lambda start, end, dim: (vectors[i:min(i + step, end)]
                                     for i in range(start, end, step)))
        self.name = f'engine stage IVF{self.index.nlist},{self.index.codes}'
        self.rescore_n = vector_index.ANN_CANDIDATES
        self.pack = ann_stage.pack

    def settings(self) -> list[str]:
        return [f'nprobe={value}' for value in self.args.nprobes]

    def use(self, setting: str) -> None:
        self.index.nprobe = int(setting.split('=')[1])

    def candidates(self, query: np.ndarray, filt: str) -> np.ndarray:
        mask = self.mask(filt)
        mask = np.ones(self.index.size, dtype=bool) if mask is None else mask
        return self.index.search(query, self.pack(mask), int(np.count_nonzero(mask)),
                                 mask.size, self.rescore_n)

    def add_one(self, row: int, vector: np.ndarray) -> None:
        self.index.add(vector[None, :])

    def nbytes(self) -> int:
        return self.index.nbytes()

    def save(self, path: pathlib.Path) -> None:
        pass  # the engine rebuilds the stage from SQLite at every start

    def load(self, path: pathlib.Path) -> None:
        self.build()


class FaissHNSWSQ(FaissCandidate):
    """IndexHNSWSQ: 8-bit scalar codes (384 B) in an HNSW graph (M=32)."""

    name = 'faiss HNSW32,SQ8'
    knob = ('ef', 'efSearch')

    def build(self) -> None:
        import faiss
        self._building()
        self.index = faiss.IndexHNSWSQ(self.data.vectors.shape[1], faiss.ScalarQuantizer.QT_8bit,
                                       32, faiss.METRIC_INNER_PRODUCT)
        self.index.train(self._train_sample())
        self._capped_add(lambda a, b: self.index.add(self.data.vectors[a:b]))
        self._ready(self.args.rescore_graph, faiss.SearchParametersHNSW)

    def knob_values(self) -> list[int]:
        return self.args.efs


class USearch(Candidate):
    """usearch HNSW (connectivity 16); no filter in its Python search: over-fetch, then drop."""

    package = 'usearch'
    filter_api = 'no (Python search takes no predicate): emulated by over-fetching k/share x 2'
    quant = 'i8'

    def build(self) -> None:
        from usearch.index import Index
        self.name = f'usearch HNSW {self.quant}'
        metric = 'hamming' if self.quant == 'b1' else 'cos'
        self.index = Index(ndim=self.data.vectors.shape[1], metric=metric, dtype=self.quant,
                           expansion_search=self.args.efs[0])
        self._capped_add(lambda a, b: self.index.add(np.arange(a, b), self._enc(a, b),
                                                     threads=self.args.build_threads))
        self.rescore_n = self.args.rescore_b1 if self.quant == 'b1' else self.args.rescore_graph
        self.notes.append(f'hardware acceleration: {self.index.hardware_acceleration}')

    def settings(self) -> list[str]:
        return [f'ef={ef}' for ef in self.args.efs]

    def use(self, setting: str) -> None:
        self.index.expansion_search = int(setting.split('=')[1])

    def _enc(self, a: int, b: int) -> np.ndarray:
        return self._code(self.data.vectors[a:b]) if self.quant == 'b1' else \
            self.data.vectors[a:b]

    @staticmethod
    def _code(vectors: np.ndarray) -> np.ndarray:
        return np.packbits(vectors > 0, axis=-1)

    def candidates(self, query: np.ndarray, filt: str) -> np.ndarray:
        mask = self.mask(filt)
        share = FILTERS[filt]
        count = min(self.held, int(self.rescore_n / share * 2)) if mask is not None else \
            self.rescore_n
        vector = self._code(query) if self.quant == 'b1' else query
        keys = np.asarray(self.index.search(vector, count, threads=1).keys, dtype=np.int64)
        if mask is not None:
            keys = keys[mask[keys]][:self.rescore_n]
        return keys

    def add_one(self, row: int, vector: np.ndarray) -> None:
        self.index.add(row, self._code(vector) if self.quant == 'b1' else vector, threads=1)

    def nbytes(self) -> int:
        return int(self.index.memory_usage)

    def save(self, path: pathlib.Path) -> None:
        self.index.save(str(path))

    def load(self, path: pathlib.Path) -> None:
        from usearch.index import Index
        self.index = Index.restore(str(path))


class USearchB1(USearch):
    """usearch HNSW over sign bits (hamming), floats rescored."""

    quant = 'b1'


class HnswLib(Candidate):
    """hnswlib float32 HNSW (M=16, ef_construction=100): exact distances, no rescoring."""

    package = 'hnswlib'
    filter_api = 'yes (a Python callable per visited id: slow for small subsets)'
    name = 'hnswlib HNSW16 float32'
    needs_rescore = False

    def build(self) -> None:
        import hnswlib
        self._keep: dict[str, Callable[[int], bool] | None] = {}
        self.index = hnswlib.Index(space='ip', dim=self.data.vectors.shape[1])
        self.index.init_index(max_elements=self.data.size + ADDS, M=16, ef_construction=100)
        self.index.set_num_threads(self.args.build_threads)
        self._capped_add(lambda a, b: self.index.add_items(self.data.vectors[a:b],
                                                           np.arange(a, b)))
        self.index.set_ef(self.args.efs[0])
        self.index.set_num_threads(1)

    def settings(self) -> list[str]:
        return [f'ef={ef}' for ef in self.args.efs]

    def use(self, setting: str) -> None:
        self.index.set_ef(int(setting.split('=')[1]))

    def candidates(self, query: np.ndarray, filt: str) -> np.ndarray:
        keep = self._keep.get(filt) if filt in self._keep else self._predicate(filt)
        try:
            rows, _ = self.index.knn_query(query[None, :], k=K, num_threads=1, filter=keep)
        except RuntimeError:  # fewer than k passed the filter: hnswlib raises, returns none
            if not any('raised' in n for n in self.notes):
                self.notes.append('knn_query raised "Cannot return the results in a contiguous '
                                  '2D array" when fewer than k passed the filter (counted as '
                                  'an empty answer)')
            return np.zeros(0, dtype=np.int64)
        return rows[0].astype(np.int64)

    def _predicate(self, filt: str) -> Callable[[int], bool] | None:
        """Make the per-id predicate hnswlib calls back (a list of bools, once per filter)."""
        mask = self.mask(filt)
        self._keep[filt] = None if mask is None else mask.tolist().__getitem__
        return self._keep[filt]

    def add_one(self, row: int, vector: np.ndarray) -> None:
        self.index.add_items(vector[None, :], [row], num_threads=1)

    def nbytes(self) -> int:
        return self._file_size

    def save(self, path: pathlib.Path) -> None:
        self.index.save_index(str(path))
        self._file_size = path.stat().st_size

    def load(self, path: pathlib.Path) -> None:
        import hnswlib
        self.index = hnswlib.Index(space='ip', dim=self.data.vectors.shape[1])
        self.index.load_index(str(path), max_elements=self.data.size + ADDS)
        self.index.set_ef(self.args.efs[0])
        self.index.set_num_threads(1)


CANDIDATES = {'signbit': SignBit, 'faiss-pq': FaissPQ, 'faiss-ivfpq': FaissIVFPQ,
              'faiss-ivfpq-sq8': FaissIVFPQRefine, 'faiss-ivfpq-sq4': FaissIVFPQRefineSQ4,
              'faiss-ivfpq-sq6': FaissIVFPQRefineSQ6, 'engine-stage': EngineStage,
              'faiss-hnswsq': FaissHNSWSQ, 'usearch-i8': USearch, 'usearch-b1': USearchB1,
              'hnswlib': HnswLib}


# --- measuring -------------------------------------------------------------------------------

def measure(cls: type[Candidate], data: Data, db: Any, args: argparse.Namespace,
            work: pathlib.Path) -> dict[str, Any]:
    """Build, search under each filter, add, save and load one candidate; its row."""
    gc.collect()
    rss0 = rss_mb()
    cand = cls(data, db, args)
    started = time.perf_counter()
    cand.build()
    row: dict[str, Any] = {'candidate': cand.name, 'build_s': time.perf_counter() - started}
    gc.collect()
    row['rss_delta_mib'] = rss_mb() - rss0
    row['held'] = cand.held
    row['rescore_n'] = cand.rescore_n
    row['filter_api'] = cand.filter_api
    row['search'] = {}
    for setting in cand.settings():
        cand.use(setting)
        row['search'][setting] = {filt: _searches(cand, data, filt) for filt in FILTERS}
    if cand.held == data.size:
        row['add_ms'] = _adds(cand, data, db)
    else:
        row['add_ms'] = None  # a capped graph: adding the rest would be the build
    path = work / 'index.bin'
    started = time.perf_counter()
    cand.save(path)
    row['save_s'] = time.perf_counter() - started
    row['file_bytes'] = path.stat().st_size if path.exists() else 0
    row['index_bytes'] = cand.nbytes()
    row['bytes_per_vector'] = row['index_bytes'] / max(cand.held, 1)
    row['file_bytes_per_vector'] = row['file_bytes'] / max(cand.held, 1)
    row['rss_bytes_per_vector'] = row['rss_delta_mib'] * 2**20 / max(cand.held, 1)
    del cand.index
    gc.collect()
    started = time.perf_counter()
    cand.load(path)
    row['load_s'] = time.perf_counter() - started
    row['notes'] = cand.notes
    row['loadavg_after'] = list(os.getloadavg())
    if path.exists():
        path.unlink()
    del cand
    gc.collect()
    return row


def _searches(cand: Candidate, data: Data, filt: str) -> dict[str, Any]:
    times, rescore_ms, recalls, returned = [], [], [], []
    # Recall of a capped graph is against the vectors it holds.
    truth = data.truth[filt] if cand.held == data.size else data.exact(filt, cand.held)
    started = time.perf_counter()
    for qi, query in enumerate(data.queries):
        clock: list[float] = []
        t0 = time.perf_counter()
        found = cand.search(query, filt, clock)
        times.append((time.perf_counter() - t0) * 1000.0)
        rescore_ms.append(sum(clock))
        exact = set(truth[qi].tolist()) - {-1}
        recalls.append(len(exact & set(found)) / max(len(exact), 1))
        returned.append(len(found))
        if time.perf_counter() - started > cand.args.search_cap_s:
            break
    out = latency_summary(times)
    out.update({'recall_at_10': float(np.mean(recalls)), 'returned_mean': float(np.mean(returned)),
                'returned_min': int(min(returned)), 'queries': len(times),
                'rescore_read_p50_ms': float(np.median(rescore_ms))})
    return out


def _adds(cand: Candidate, data: Data, db: Any) -> dict[str, float]:
    from robotmem_ros.engine import store
    times = []
    now = time.time()
    for i, vector in enumerate(data.extra):
        row = data.size + i
        if isinstance(cand, SignBit):  # the engine's index catches up with a committed row
            with db.write() as conn:
                conn.execute('INSERT INTO memories(id, type, content, content_hash, collection, '
                             "confidence, created_at, valid_from) VALUES (?, 'fact', ?, ?, "
                             "'main', 0.5, ?, ?)", (row + 1, f'm{row}', f'h{row}', now, now))
                store.put_vector(conn, row + 1, vector)
        t0 = time.perf_counter()
        cand.add_one(row, vector)
        times.append((time.perf_counter() - t0) * 1000.0)
    if isinstance(cand, SignBit):
        with db.write() as conn:  # leave the store as the other candidates expect it
            ids = [(data.size + i + 1,) for i in range(len(data.extra))]
            conn.executemany('DELETE FROM memory_vectors WHERE memory_id = ?', ids)
            conn.executemany('DELETE FROM memory_embeddings WHERE memory_id = ?', ids)
            conn.executemany('DELETE FROM memories WHERE id = ?', ids)
    return latency_summary(times)


def float_read_cost(db: Any, data: Data, counts: Sequence[int]) -> dict[str, Any]:
    """p50 ms of reading ``count`` float vectors of random ids from SQLite (the rescoring)."""
    from robotmem_ros.engine import vector_store
    rng = np.random.default_rng(5)
    out = {}
    for count in counts:
        times = []
        for _ in range(30):
            ids = sorted(rng.choice(data.size, min(count, data.size), replace=False) + 1)
            t0 = time.perf_counter()
            vector_store.active_embeddings(db.reader(), [int(i) for i in ids], ('', []))
            times.append((time.perf_counter() - t0) * 1000.0)
        out[str(count)] = float(np.median(times))
    return out


def available(cls: type[Candidate]) -> bool:
    """Whether the candidate's package is installed."""
    return not cls.package or importlib.util.find_spec(cls.package) is not None


def _queries(args: argparse.Namespace) -> np.ndarray:
    from precomputed import embed_cached
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    real = load_embedder(MemoryConfig())
    texts = datagen.queries(args.queries, seed=args.seed + 2)
    return embed_cached(real, texts).astype(np.float32)


def _print(size: int, rows: list[dict[str, Any]]) -> None:
    lines = []
    for r in rows:
        add = (r['add_ms'] or {}).get('p50_ms', float('nan'))
        for setting, by_filter in r['search'].items():
            lines.append([f"{r['candidate']} {setting}".strip(), r['build_s'], add]
                         + [by_filter[f]['p50_ms'] for f in FILTERS]
                         + [by_filter[f]['recall_at_10'] for f in FILTERS]
                         + [r['bytes_per_vector'], r['file_bytes_per_vector'], r['load_s'],
                            r['held']])
    print_table(f'N = {size}', ['candidate', 'build s', 'add ms', 'p50 all', 'p50 10%',
                                'p50 1%', 'r@10 all', 'r@10 10%', 'r@10 1%', 'B/vec RAM',
                                'B/vec file', 'load s', 'held'], lines)


def _merged(sizes: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Sizes with ``entry`` in; candidates measured before at that size and not now are kept."""
    now = {r['candidate'] for r in entry['candidates']}
    for old in sizes:
        if old['n'] == entry['n']:
            entry['candidates'] = [r for r in old['candidates'] if r['candidate'] not in now] \
                + entry['candidates']
    return sorted([e for e in sizes if e['n'] != entry['n']] + [entry], key=lambda e: e['n'])


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every installed candidate at every size; write ann_candidates.json."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--sizes', default='10000,100000')
    parser.add_argument('--candidates', default=','.join(CANDIDATES))
    parser.add_argument('--pool', type=int, default=4000)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--queries', type=int, default=200)
    parser.add_argument('--train', type=int, default=20_000, help='training sample (faiss)')
    parser.add_argument('--nprobes', default='32,128', help='IVF lists probed (each measured)')
    parser.add_argument('--efs', default='64,256,1024', help='HNSW search breadths (each)')
    parser.add_argument('--rescore-pq', type=int, default=256)
    parser.add_argument('--rescore-b1', type=int, default=256)
    parser.add_argument('--rescore-graph', type=int, default=40)
    parser.add_argument('--refine-pool', type=int, default=1000,
                        help='PQ candidates re-ranked by the in-RAM refine codes')
    parser.add_argument('--build-threads', type=int, default=1,
                        help='threads for builds (1: the 2 cores of the target are shared)')
    parser.add_argument('--search-cap-s', type=float, default=60.0,
                        help='stop a series of searches after this long (report how many ran)')
    parser.add_argument('--append', action='store_true',
                        help='keep the sizes already in the result file (replace same N)')
    parser.add_argument('--build-cap-s', type=float, default=240.0)
    parser.add_argument('--work', type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()))
    parser.add_argument('--results', type=pathlib.Path, default=RESULTS_DIR)
    parser.add_argument('--name', default='ann_candidates')
    args = parser.parse_args(argv)
    args.nprobes = [int(n) for n in args.nprobes.split(',')]
    args.efs = [int(ef) for ef in args.efs.split(',')]
    chosen = [CANDIDATES[c] for c in args.candidates.split(',')]
    skipped = [c.__name__ for c in chosen if not available(c)]
    pool = np.load(_pool(args.pool, args.seed))
    queries = _queries(args)
    doc: dict[str, Any] = {'params': {k: str(v) if isinstance(v, pathlib.Path) else v
                                      for k, v in vars(args).items() if k != 'results'},
                           'k': K, 'filters': FILTERS, 'skipped_not_installed': skipped,
                           'sizes': []}
    old = args.results / f'{args.name}.json'
    if args.append and old.exists():
        doc['sizes'] = json.loads(old.read_text())['sizes']
    for size in [int(s) for s in args.sizes.split(',')]:
        started = time.perf_counter()
        data = Data(pool, size, queries, args.seed)
        with tempfile.TemporaryDirectory(prefix='ann_', dir=args.work) as work:
            db = build_store(pathlib.Path(work) / 'store.db', data)
            entry: dict[str, Any] = {'n': size, 'prepare_s': time.perf_counter() - started,
                                     'loadavg_start': list(os.getloadavg()),
                                     'store_bytes': (pathlib.Path(work) / 'store.db').stat()
                                     .st_size,
                                     'float_read_p50_ms': float_read_cost(db, data,
                                                                          [40, 256, 2500]),
                                     'candidates': []}
            for cls in chosen:
                if not available(cls):
                    continue
                row = measure(cls, data, db, args, pathlib.Path(work))
                print(row, flush=True)
                entry['candidates'].append(row)
            db.close()
        entry['loadavg_end'] = list(os.getloadavg())
        doc['sizes'] = _merged(doc['sizes'], entry)
        _print(size, entry['candidates'])
        print(f'wrote {write_result(args.name, doc, args.results)}', flush=True)
        del data
        gc.collect()
    return 0


if __name__ == '__main__':
    sys.exit(main())
