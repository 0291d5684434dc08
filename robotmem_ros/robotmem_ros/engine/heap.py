"""
Hand the heap that background work freed back to the system (glibc's ``malloc_trim``).

glibc keeps freed chunks for reuse and returns only the top of each arena by itself. Work that
frees much at once leaves the node's RSS above what it uses: the approximate stage's build (a
node at 1M memories held 717 MiB after it against about 300 for what it uses), and the background
threads' arenas after the text index's catch-ups and the learns' temporaries (a 1M session of
recalls and learns: 57 MiB returned by one trim, docs/performance.md). A trim walks every
arena's free chunks: about 6 ms on that heap, under 1 ms once trimmed, so the callers run it
in background threads and not on every pass. Elsewhere than glibc there is no such call; the
process reuses the memory instead.

A trim returns only whole free pages. What it cannot return is heap that large blocks left
fragmented, and glibc puts large blocks in the heap by its own rule: it maps a block of 128 KiB
or more on its own, but each time such a block is freed it raises that threshold to the block's
size (up to 32 MiB). After the first large temporary, the searches' numpy arrays and the
learns' buffers (MBs at 1M memories) came from the heap, and a 1M session left the node 20-50
MiB above one whose threshold stays fixed (``map_large_blocks``; docs/performance.md, "Large
blocks mapped"). A fixed threshold also maps the embedder's intermediates afresh: at 128 KiB,
glibc's first, batches embedded 23 % slower and single texts 0.2-0.3 ms slower; at 1 MiB, with
the heap's top kept up to TOP_KEPT between trims, batches 12 % slower and single texts alike.
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
# Free heap top that free() leaves in place once the threshold is fixed (glibc's own rule
# keeps twice the threshold); the periodic trims return it.
TOP_KEPT = 32 * 2**20
# Least time between two trims asked for by periodic work (``return_freed(every_s=...)``).
PERIOD_S = 30.0

_last = float('-inf')
_owed = False  # a periodic trim was declined since the last trim


def return_freed(every_s: float = 0.0) -> bool:
    """
    Trim the heap unless a trim ran less than ``every_s`` seconds ago; True if one ran.

    ``every_s`` 0 trims now (after a build); periodic callers pass PERIOD_S.
    """
    global _last, _owed
    now = time.monotonic()
    if now - _last < every_s:
        _owed = True
        return False
    _last, _owed = now, False
    trim = _glibc('malloc_trim')
    if trim is None:
        return False
    trim(0)
    return True


def return_owed() -> bool:
    """
    Trim once PERIOD_S has passed if a periodic trim was declined since the last; True if one ran.

    The trailing trim of a burst: the last catch-ups of a session fall inside the period of the
    first, so without it what they freed stayed with the node while it idled (a 1M session, 35 s
    after its calls: 658 / 690 MiB before, 628 / 643 with it; docs/performance.md). Idle
    pollers call it.
    """
    return _owed and return_freed(PERIOD_S)


def map_large_blocks(threshold: int) -> bool:
    """
    Give each heap block of ``threshold`` bytes or more a memory map of its own, for good.

    Setting the threshold turns off glibc's rule that raises it (module docstring), so such a
    block goes back to the system when freed; the heap's top is then kept up to TOP_KEPT.
    0 keeps glibc's rule. Process-wide, as malloc is; True if set (False elsewhere than glibc).
    """
    mallopt = _glibc('mallopt')
    if threshold <= 0 or mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold) and mallopt(M_TRIM_THRESHOLD, TOP_KEPT))


def _glibc(function: str) -> Callable[..., int] | None:
    """Return glibc's ``function``, or None elsewhere (musl, macOS), where nothing is tuned."""
    try:
        return getattr(ctypes.CDLL('libc.so.6'), function)
    except (OSError, AttributeError):
        return None
