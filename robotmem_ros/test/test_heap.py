"""engine/heap.py: freed heap goes back, periodic trims keep a period, large blocks stay mapped."""

import ctypes
import json
import os
import platform
import sys
import tempfile

from conftest import script_result
import pytest
from robotmem_ros.config import MemoryConfig
from robotmem_ros.engine import heap, MemoryEngine

MIB = 2**20
RESULT = 'heap result: '

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != 'glibc',
                                reason='malloc_trim is glibc only')


def test_a_trim_runs_now_and_periodic_callers_wait_for_the_period():
    assert heap.return_freed() is True
    assert heap.return_freed(heap.PERIOD_S) is False  # one just ran
    assert heap.return_freed(0.0) is True


def test_a_declined_periodic_trim_runs_once_the_period_has_passed(monkeypatch):
    assert heap.return_freed() is True
    assert heap.return_owed() is False  # none declined
    assert heap.return_freed(heap.PERIOD_S) is False  # declined: owed
    assert heap.return_owed() is False  # the period has not passed
    monkeypatch.setattr(heap, '_last', heap._last - heap.PERIOD_S)
    assert heap.return_owed() is True
    assert heap.return_owed() is False  # paid


def test_freed_pages_go_back_to_the_system(monkeypatch):
    """Freed small chunks that glibc keeps leave RSS after a trim."""
    psutil = pytest.importorskip('psutil')
    process = psutil.Process()
    heap.return_freed()
    # No trim from another thread (an earlier test's index worker) while the chunks are held.
    monkeypatch.setattr(heap, '_last', float('inf'))
    before = process.memory_info().rss
    blocks = [bytearray(64 * 1024 - 64) for _ in range(2000)]  # 128 MiB below mmap's threshold
    keep = blocks[-1]  # the top chunk stays in use: glibc cannot shrink the heap by itself
    del blocks
    held = process.memory_info().rss
    monkeypatch.setattr(heap, '_last', float('-inf'))
    assert heap.return_freed() is True
    after = process.memory_info().rss
    assert held - before > 64 * 2**20
    assert after < held - 64 * 2**20
    del keep


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks',
        'fordblks', 'keepcost')]


def _heap_and_mapped() -> tuple[int, int]:
    """Return the bytes of the heap and of the blocks mapped on their own (``mallinfo2``)."""
    mallinfo2 = ctypes.CDLL('libc.so.6').mallinfo2
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.arena, info.hblkhd


def _free_a_mapped_block(size: int) -> list[bytearray]:
    """
    Free one block of ``size`` that glibc mapped on its own; return the blocks held to get one.

    glibc serves a request from free heap first and maps it only when the heap has no room, so
    blocks are taken (and held) until one is mapped, or the heap grows: its threshold is then
    above ``size`` already.
    """
    held = []
    while True:
        heap_before, mapped_before = _heap_and_mapped()
        block = bytearray(size)
        heap_after, mapped_after = _heap_and_mapped()
        if mapped_after > mapped_before or heap_after > heap_before:
            del block
            return held
        held.append(block)


def returned_at_free(threshold: int) -> float:
    """
    Return the MiB 32 freed 2 MiB blocks give back at once, an engine having set ``threshold``.

    A mapped 8 MiB block freed first raises glibc's own threshold above the blocks' size (in a
    process whose heap had 20 MiB free, from compiling modules, the block came from there and
    raised nothing). Each freed block lies between two blocks still held, so glibc cannot merge
    it into the heap's top and trim it by itself.
    """
    import psutil
    with tempfile.TemporaryDirectory() as tmp:
        MemoryEngine(MemoryConfig(db_path=f'{tmp}/m.db', embed_backend='none',
                                  heap_mmap_threshold=threshold)).close()
    process = psutil.Process()
    held = _free_a_mapped_block(8 * MIB)
    blocks = [bytearray(2 * MIB) for _ in range(64)]
    rss = process.memory_info().rss
    del blocks[::2]
    returned = (rss - process.memory_info().rss) / MIB
    del blocks, held
    return returned


def test_the_engine_keeps_large_blocks_mapped():
    """With the default threshold freed blocks leave at once; with glibc's rule they stay."""
    pytest.importorskip('psutil')
    if not hasattr(ctypes.CDLL('libc.so.6'), 'mallinfo2'):
        pytest.skip('mallinfo2 needs glibc 2.33 or later')
    fixed = script_result(__file__, RESULT, str(MemoryConfig().heap_mmap_threshold))
    glibc = script_result(__file__, RESULT, '0')
    assert fixed > 48, fixed
    assert glibc < 16, glibc


if __name__ == '__main__':
    print(RESULT + json.dumps(returned_at_free(int(sys.argv[1]))), flush=True)
    os._exit(0)
