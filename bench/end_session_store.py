"""
end_session of a new 1 000-fact session in an existing large store (issue 15).

Filling a million memories takes minutes per code version, so this bench reuses a store that
``bench_scale.py --worker --work DIR --sizes 1000000`` left in ``DIR/scale.db``: copy it once
per version measured (the session is written into the copy). A version from before schema 4
(the decay index) needs a copy at schema 3 (``DROP INDEX idx_memories_decay; PRAGMA
user_version=3``). The code measured is the ``robotmem_ros`` first on PYTHONPATH; list this
repository's package after it, or bench/common.py puts that one first (the JSON names it).
As in ``bench_scale.py``, embedding is excluded (the pool's vectors) and the vector index's
approximate stage is built before the clock starts.

Usage::

    PYTHONPATH=<package of the version>:robotmem_ros python bench/end_session_store.py \
        --store /tmp/copy.db --seed 11 --name end_session_1m_after
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Sequence

import numpy as np

from bench_scale import _end_session, _pool, _settled  # noqa: I100,I201
from common import write_result  # noqa: I100


def main(argv: Sequence[str] | None = None) -> int:
    """Time one end_session in the given store; print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--store', required=True, help='a copy of a filled scale.db')
    parser.add_argument('--facts', type=int, default=1000)
    parser.add_argument('--pool', type=int, default=4000)
    parser.add_argument('--seed', type=int, default=11)
    parser.add_argument('--name', default='', help='also write bench/results/NAME.json')
    args = parser.parse_args(argv)
    import robotmem_ros
    from precomputed import PrecomputedEmbedder
    from robotmem_ros.config import MemoryConfig
    from robotmem_ros.embedding import load_embedder
    from robotmem_ros.engine import MemoryEngine, store
    real = load_embedder(MemoryConfig())
    engine = MemoryEngine(MemoryConfig(db_path=args.store),
                          PrecomputedEmbedder(real, [], real.embed([])))
    engine.recall('warm up', n=10)  # loads the vector index and starts its stage
    row = {'store': str(pathlib.Path(args.store).resolve()),
           'memories': engine.status().active_memories_count,
           'package': str(pathlib.Path(robotmem_ros.__file__).parent),
           'ann_build_s': _settled(engine.db.vectors)}
    pool = np.load(_pool(args.pool, 0))
    row.update(_end_session(engine, store, pool,
                            argparse.Namespace(end_session=args.facts, seed=args.seed)))
    engine.close()
    print(json.dumps(row), flush=True)
    if args.name:
        write_result(args.name, row)
    return 0


if __name__ == '__main__':
    sys.exit(main())
