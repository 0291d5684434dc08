"""A small thread-safe LRU of query vectors: robots re-ask the same recall queries a lot."""

from __future__ import annotations

from collections import OrderedDict
import threading
from typing import Callable

import numpy as np


class QueryCache:
    """LRU keyed by query text; ``size == 0`` disables caching."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, text: str, compute: Callable[[str], np.ndarray]) -> np.ndarray:
        """Return the cached vector of ``text``, computing (and caching) it on a miss."""
        if self.size == 0:
            return compute(text)
        with self._lock:
            hit = self._items.get(text)
            if hit is not None:
                self._items.move_to_end(text)
                return hit
        vector = compute(text)
        # Shared between callers, so nobody may modify it in place.
        vector.flags.writeable = False
        with self._lock:
            self._items[text] = vector
            self._items.move_to_end(text)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return vector

    def __len__(self) -> int:
        return len(self._items)
