"""Perception buffer logic, without ROS: batching, bounds, sequence gaps, flush on stop."""

import threading

from robotmem_ros.node.perception_ingest import PerceptionIngest, SeqGapCounter
from robotmem_ros.types import PerceptionInput


class RecordingWriter:
    """Collects batches like save_perceptions would; can be made to block or fail."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def __call__(self, batch):
        self.gate.wait()
        if self.fail:
            raise OSError('disk full')
        self.batches.append([p.description for p in batch])
        return [0 if p.description == 'invalid' else 1 + i for i, p in enumerate(batch)]


def _item(i: int) -> PerceptionInput:
    return PerceptionInput(description=f'p{i}')


def test_flush_writes_one_call_per_batch_in_order():
    writer = RecordingWriter()
    ingest = PerceptionIngest(writer, batch_size=4, flush_interval=60.0, max_buffer=100)
    for i in range(10):
        ingest.offer(_item(i))
    assert ingest.flush() == 10
    assert [len(b) for b in writer.batches] == [4, 4, 2]
    assert sum(writer.batches, []) == [f'p{i}' for i in range(10)]
    c = ingest.counters()
    assert (c.received, c.written, c.dropped, c.failed) == (10, 10, 0, 0)
    assert (c.backlog, c.batches) == (0, 3)


def test_full_buffer_drops_oldest_and_counts():
    writer = RecordingWriter()
    ingest = PerceptionIngest(writer, batch_size=100, flush_interval=60.0, max_buffer=5)
    for i in range(8):
        ingest.offer(_item(i))
    c = ingest.counters()
    assert (c.received, c.dropped, c.backlog) == (8, 3, 5)
    ingest.flush()
    assert writer.batches == [[f'p{i}' for i in range(3, 8)]]


def test_shrinking_max_buffer_drops_immediately():
    ingest = PerceptionIngest(RecordingWriter(), batch_size=100, flush_interval=60.0,
                              max_buffer=10)
    for i in range(10):
        ingest.offer(_item(i))
    ingest.configure(batch_size=100, flush_interval=60.0, max_buffer=4)
    assert ingest.counters().dropped == 6
    assert ingest.counters().backlog == 4


def test_failed_batch_is_counted_and_writer_survives():
    writer = RecordingWriter()
    flushes = []
    ingest = PerceptionIngest(writer, batch_size=2, flush_interval=60.0, max_buffer=100,
                              on_flush=lambda: flushes.append(1))
    writer.fail = True
    for i in range(3):
        ingest.offer(_item(i))
    assert ingest.flush() == 0
    writer.fail = False
    ingest.offer(_item(9))
    assert ingest.flush() == 1
    c = ingest.counters()
    assert (c.failed, c.written, c.batches) == (3, 1, 3)
    assert len(flushes) == 3


def test_rejected_items_count_as_failed():
    writer = RecordingWriter()
    ingest = PerceptionIngest(writer, batch_size=10, flush_interval=60.0, max_buffer=100)
    for description in ('ok', 'invalid', 'ok'):
        ingest.offer(PerceptionInput(description=description))
    assert ingest.flush() == 2
    c = ingest.counters()
    assert (c.written, c.failed, c.batches) == (2, 1, 1)


def test_unreadable_message_counts_as_received_and_failed():
    writer = RecordingWriter()
    ingest = PerceptionIngest(writer, batch_size=10, flush_interval=60.0, max_buffer=100)
    ingest.offer(PerceptionInput(description='ok'), 'cam', 1)
    ingest.reject('data: invalid JSON', 'cam', 3)
    assert ingest.flush() == 1
    c = ingest.counters()
    assert (c.received, c.written, c.failed, c.seq_gaps) == (2, 1, 1, 1)


def test_writer_thread_writes_full_batches_and_stop_writes_rest():
    writer = RecordingWriter()
    flushed = threading.Semaphore(0)
    ingest = PerceptionIngest(writer, batch_size=3, flush_interval=60.0, max_buffer=100,
                              on_flush=flushed.release)
    ingest.start()
    for i in range(7):
        ingest.offer(_item(i))
    assert flushed.acquire(timeout=10) and flushed.acquire(timeout=10)
    assert ingest.counters().backlog == 1  # the partial batch waits for the interval
    assert ingest.stop() == 1
    assert writer.batches == [['p0', 'p1', 'p2'], ['p3', 'p4', 'p5'], ['p6']]


def test_writer_thread_flushes_partial_batch_after_interval():
    writer = RecordingWriter()
    done = threading.Event()
    ingest = PerceptionIngest(writer, batch_size=1000, flush_interval=0.05, max_buffer=100,
                              on_flush=done.set)
    ingest.start()
    ingest.offer(_item(0))
    assert done.wait(10)
    ingest.stop()
    assert writer.batches == [['p0']]


def test_stalled_writer_keeps_memory_bounded():
    writer = RecordingWriter()
    writer.gate.clear()
    ingest = PerceptionIngest(writer, batch_size=2, flush_interval=60.0, max_buffer=10)
    ingest.start()
    for i in range(1000):
        ingest.offer(_item(i))
    c = ingest.counters()
    assert c.backlog <= 10
    writer.gate.set()
    ingest.stop()
    c = ingest.counters()
    assert c.received == c.written + c.dropped == 1000
    assert c.backlog == 0


def test_seq_gaps_are_per_publisher():
    gaps = SeqGapCounter()
    for seq in range(1, 6):  # two interleaved publishers, no loss
        gaps.observe(('cam', 's1'), seq)
        gaps.observe(('arm', 's1'), seq)
    assert gaps.gaps == 0
    assert gaps.observe(('cam', 's1'), 9) == 3
    assert gaps.observe(('cam', 's1'), 1) == 0  # restart, not a gap
    assert gaps.observe(('cam', 's2'), 7) == 0  # new session starts fresh
    assert gaps.gaps == 3


def test_seq_gap_table_is_bounded():
    gaps = SeqGapCounter(max_publishers=3)
    for key in range(10):
        gaps.observe(key, 1)
    assert len(gaps._last) == 3
