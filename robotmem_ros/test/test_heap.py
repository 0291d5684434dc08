"""engine/heap.py: the freed heap is handed back, and periodic callers are held to a period."""

import platform

import pytest
from robotmem_ros.engine import heap

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
