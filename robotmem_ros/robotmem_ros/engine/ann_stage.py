"""
Approximate first pass of the vector index for large stores: faiss IVF with 4-bit fast-scan codes.

Why this index (measured on the 2-core target; docs/performance.md, "Choosing the vector
index", "One code per vector" and "Fast-scan codes"): at 1M memories the sign-bit scan costs
about 120 ms per search, because it touches every code and re-reads 2 500 float vectors to hold
recall. An inverted file of sqrt(N) lists whose entries are 4-bit codes of each vector's
residual, one code per dimension (192 bytes for 384 dimensions), answers in a few ms with
recall@10 0.99 after 80 float vectors were re-read from SQLite. The codes are faiss's
product-quantizer codes of one-dimensional sub-vectors in its fast-scan layout (``PQ{d}x4fs``):
16 levels per dimension, learnt, where the scalar quantizer's 4-bit codes (``SQ4``) spread 16
even levels over each dimension's range; laid out 32 vectors to a block, they are scored with
SIMD table lookups: 0.7 ms instead of 2.9 for the lists of an unfiltered 1M search, at the
same recall and size. They score every code of a probed list, so a selective filter, which
probes more lists, gains nothing (up to 1.4 ms slower at 10 % and 1 %), and a build encodes
slower (21 s at 1M instead of 10, in the background). Before the scalar codes, 48-byte PQ
codes were re-ranked by a second, 4-bit copy of every vector (46 MiB more at 1M). Graph
indexes (HNSW in faiss, usearch, hnswlib) reached 0.19-0.58 recall@10 at 1M on the same
vectors, and a filter would cut their graph.

The stage only proposes candidates: its ids are positions of the sign-bit index
(engine/vector_index.py), whose boolean filter mask becomes a faiss ``IDSelectorBitmap``
applied inside the scan, and every candidate is rescored from the float vectors in SQLite by
the caller. A filter that keeps a share s of the rows probes 1/sqrt(s) times more lists (up
to all): its nearest rows lie farther from the query, in more lists. faiss is optional:
without it (or below ``ann_min_vectors``) the sign-bit scan answers alone.
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

# 4-bit codes of each dimension of a vector's residual, fast-scan layout: 192 MB at 1M (384 dims)
CODES = 'PQ{dim}x4fs'
TRAIN_PER_LIST = 40  # faiss wants about 39 training points per IVF list
TRAIN_MIN = 20_000   # and at least this many (what the earlier PQ codes needed; kept)


def available() -> bool:
    """Return True when faiss can be imported (``faiss-cpu``, requirements/runtime.txt)."""
    return faiss is not None


class AnnStage:
    """A trained IVF index of scalar codes over positions ``0 .. size - 1`` of the vector index."""

    def __init__(self, dim: int, trained_for: int, nprobe: int) -> None:
        self.dim = dim
        self.trained_for = trained_for
        self.nprobe = nprobe
        self.nlist = lists_for(trained_for)
        self.codes = CODES.format(dim=dim)
        self._index = faiss.index_factory(dim, f'IVF{self.nlist},{self.codes}',
                                          faiss.METRIC_INNER_PRODUCT)

    @property
    def size(self) -> int:
        """Positions added so far."""
        return int(self._index.ntotal)

    def train(self, sample: np.ndarray) -> None:
        """
        Learn the coarse lists and each dimension's 16 levels from a sample.

        A code is found dimension by dimension among 16 levels; with the levels also held
        transposed faiss compares the 16 in one SIMD pass: encoding twice as fast, the same codes
        (docs/performance.md, "Fast-scan codes").
        """
        _one_thread()
        self._index.train(np.ascontiguousarray(sample, dtype=np.float32))
        faiss.downcast_index(self._index).pq.sync_transposed_centroids()

    def add(self, vectors: np.ndarray) -> None:
        """Append the vectors of the next positions, in position order."""
        _one_thread()
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def compact(self) -> None:
        """
        Copy each inverted list into a new buffer sized for it, all lists at once.

        The lists grow as the build adds its blocks of vectors, each time into a larger buffer,
        and the outgrown buffers of a thousand lists fragment the heap: at 1M the engine held
        49 MiB more without the copy (docs/performance.md, "Fast-scan codes"). The copy holds
        the lists twice for a moment (192 MiB at 1M), in the background build. A list's codes
        are copied as they are laid out (whole blocks of 32 packed codes) into a buffer whose
        capacity faiss rounds up to a power of two (the engine held 18 MiB more at 1M than with
        the scalar codes' exact lists), its ids into a vector of exactly their count.
        """
        _one_thread()
        ivf = faiss.downcast_index(self._index)
        grown = faiss.downcast_InvertedLists(ivf.invlists)
        packer = ivf.get_CodePacker()
        exact = faiss.BlockInvertedLists(ivf.nlist, packer)
        packer.thisown = False  # the lists own their packer
        for number in range(ivf.nlist):
            count = grown.list_size(number)
            if count:
                exact.add_entries(number, count, grown.get_ids(number), grown.get_codes(number))
        ivf.replace_invlists(exact, True)  # frees the grown lists
        exact.thisown = False  # the index owns it now

    def search(self, query: np.ndarray, bitmap: np.ndarray, selected: int, held: int,
               count: int) -> np.ndarray:
        """
        Positions of the ``count`` best candidates among those set in ``bitmap``.

        ``bitmap`` is a selection's mask packed eight positions to a byte (``pack``); it is
        tested inside the scan, so a filter never leaves slots to rows it excludes. The mask
        was taken over ``held`` positions, and ``selected`` of them pass the filter, which sets
        how many lists are probed. A stage that grew after the mask was taken holds positions
        past ``held``, which the caller's arrays of that moment lack: none is returned, though
        a bitmap kept with a growing mask can gain their bits in its last byte (and faiss
        bounds the bitmap by its length in bytes only). Positions beyond ``size`` are not in
        the index yet and the caller searches them itself.
        """
        _one_thread()
        selector = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
        params = faiss.SearchParametersIVF(sel=selector, nprobe=self.probes(selected, held))
        _, positions = self._index.search(
            np.asarray(query, dtype=np.float32)[None, :], count, params=params)
        found = positions[0]
        return found[(found >= 0) & (found < held)]

    def probes(self, selected: int, held: int) -> int:
        """
        Count the lists to probe when ``selected`` of ``held`` positions pass the filter.

        ``nprobe`` for an unfiltered search, and 1/sqrt(share) times more for a filter that keeps
        a share of the rows, up to every list: with a fixed count a 1 % filter's recall@10 was
        0.96 at 1M, 1.00 with either 1/share or 1/sqrt(share) times the lists, and the latter
        cost 3 ms where the former cost 8 (docs/performance.md, "One code per vector").
        """
        share = max(selected, 1) / max(held, 1)
        return min(self.nlist, math.ceil(self.nprobe / math.sqrt(share)))

    def nbytes(self) -> int:
        """Bytes the index holds (codes and ids in the lists, centroids), for stats and benches."""
        ivf = faiss.downcast_index(self._index)
        return int(ivf.invlists.compute_ntotal() * (ivf.code_size + 8) + ivf.nlist * ivf.d * 4)


def pack(mask: np.ndarray) -> np.ndarray:
    """Pack a bool mask over positions as faiss's ``IDSelectorBitmap`` reads it (little bits)."""
    return np.packbits(mask, bitorder='little')


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
    stage.compact()
    heap.return_freed()  # the blocks and training sample freed
    LOG.info('vector index: IVF%d,%s stage built over %d vectors', stage.nlist, stage.codes,
             stage.size)
    return stage
