"""
Approximate first pass of the vector index for large stores: faiss IVF-PQ with a refine stage.

Why this index (measured on the 2-core target; docs/performance.md, "Choosing the vector
index"): at 1M memories the sign-bit scan costs about 120 ms per search, because it touches
every code and re-reads 2 500 float vectors to hold recall. An inverted file of sqrt(N) lists
with 48-byte product-quantization codes, whose best candidates are re-ranked in RAM by 4-bit
scalar codes, answered in a few ms with recall@10 0.98 after 80 float vectors were re-read
from SQLite (6-bit codes held 0.99 with 40, but the node then took 640 MiB, over the 600 MiB
budget; docs/performance.md, "The IVF-PQ stage, built"). Graph indexes (HNSW in faiss,
usearch, hnswlib) reached 0.19-0.58 recall@10 at 1M on the same vectors, and a filter would
cut their graph.

The stage only proposes candidates: its ids are positions of the sign-bit index
(engine/vector_index.py), whose boolean filter mask becomes a faiss ``IDSelectorBitmap``
applied inside the scan, and every candidate is rescored from the float vectors in SQLite by
the caller. faiss is optional: without it (or below ``ann_min_vectors``) the sign-bit scan
answers alone.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Iterator

import numpy as np

from robotmem_ros.engine import heap

try:
    import faiss
except ImportError:  # an optional accelerator: the sign-bit scan answers without it
    faiss = None

LOG = logging.getLogger('robotmem.engine')

PQ_BYTES = 48       # one byte per 8 dimensions of a 384-d vector: as small as the sign bits
REFINE = 'SQ4'      # 4-bit scalar codes: 250 MB at 1M; recall@10 0.98 with 80 floats re-read
TRAIN_PER_LIST = 40  # faiss wants about 39 training points per IVF list
TRAIN_MIN = 20_000   # and enough for 256 centroids in each PQ sub-space
REFINE_FACTOR = 25   # PQ candidates re-ranked by the scalar codes per float re-read


def available() -> bool:
    """Return True when faiss can be imported (``faiss-cpu``, requirements/runtime.txt)."""
    return faiss is not None


class AnnStage:
    """A trained IVF-PQ + refine index over positions ``0 .. size - 1`` of the vector index."""

    def __init__(self, dim: int, trained_for: int, nprobe: int) -> None:
        self.dim = dim
        self.trained_for = trained_for
        self.nprobe = nprobe
        self.nlist = lists_for(trained_for)
        # PQ48np: no polysemous training (faiss's default for "PQ48" spends minutes on it).
        self._index = faiss.index_factory(dim, f'IVF{self.nlist},PQ{PQ_BYTES}np,Refine({REFINE})',
                                          faiss.METRIC_INNER_PRODUCT)

    @property
    def size(self) -> int:
        """Positions added so far."""
        return int(self._index.ntotal)

    def train(self, sample: np.ndarray) -> None:
        """Learn the coarse lists and the PQ and scalar codebooks from a sample."""
        _one_thread()
        self._index.train(np.ascontiguousarray(sample, dtype=np.float32))

    def add(self, vectors: np.ndarray) -> None:
        """Append the vectors of the next positions, in position order."""
        _one_thread()
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: np.ndarray, mask: np.ndarray, count: int) -> np.ndarray:
        """
        Positions of the ``count`` best candidates among ``mask`` (a bool array over positions).

        The mask is tested inside the scan, so a filter never leaves slots to rows it excludes;
        positions beyond ``size`` are not in the index yet and the caller searches them itself.
        """
        _one_thread()
        bits = np.packbits(mask[:self.size], bitorder='little')
        selector = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bits))
        base = faiss.SearchParametersIVF(sel=selector, nprobe=self.nprobe)
        params = faiss.IndexRefineSearchParameters(k_factor=REFINE_FACTOR,
                                                   base_index_params=base)
        _, positions = self._index.search(
            np.asarray(query, dtype=np.float32)[None, :], count, params=params)
        found = positions[0]
        return found[found >= 0]

    def nbytes(self) -> int:
        """Bytes the index holds (codes, lists, codebooks), for stats and benchmarks."""
        ivf = faiss.downcast_index(self._index.base_index)
        refine = faiss.downcast_index(self._index.refine_index)
        return int(ivf.invlists.compute_ntotal() * (PQ_BYTES + 8)
                   + refine.sa_code_size() * refine.ntotal
                   + ivf.nlist * ivf.d * 4)


def _one_thread() -> None:
    """
    Run faiss's next call on the calling thread alone.

    OpenMP's thread count is a per-thread setting: without this in every thread that calls
    faiss, adding one vector took 16 ms instead of 0.02 (its team of threads spun up per call),
    and a build would take both cores from the node's executor.
    """
    faiss.omp_set_num_threads(1)


def lists_for(count: int) -> int:
    """IVF lists for a store of ``count`` vectors: sqrt(N), as measured at 1M."""
    return max(16, int(math.sqrt(count)))


def build(count: int, nprobe: int, sample: Callable[[np.ndarray], np.ndarray],
          blocks: Callable[[int, int, int], Iterator[np.ndarray]]) -> AnnStage:
    """
    Train and fill a stage for positions ``0 .. count - 1`` without holding their floats at once.

    ``sample(positions)`` returns the float vectors of those positions (a seeded random
    training sample); ``blocks(start, end, dim)`` yields consecutive blocks of float vectors
    covering positions ``start .. end - 1``. Peak memory is the index plus one block (the
    floats of 1M memories would take 1.5 GB).
    """
    wanted = min(count, max(TRAIN_MIN, TRAIN_PER_LIST * lists_for(count)))
    positions = np.sort(np.random.default_rng(count).choice(count, wanted, replace=False))
    training = sample(positions)
    stage = AnnStage(training.shape[1], count, nprobe)
    stage.train(training)
    del training
    for block in blocks(0, count, stage.dim):
        stage.add(block)
    heap.return_freed()  # the blocks and training sample freed
    LOG.info('vector index: IVF%d,PQ%d + %s stage built over %d vectors',
             stage.nlist, PQ_BYTES, REFINE, stage.size)
    return stage
