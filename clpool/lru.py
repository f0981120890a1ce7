"""A bounded, thread-safe cache that keeps its most recently used entries."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    """A dict holding at most `limit()` entries; the least recently used go first, and
    `on_evict(value)` is called for each one dropped."""

    def __init__(
        self, limit: Callable[[], int], on_evict: Callable[[V], None] | None = None
    ) -> None:
        self._limit = limit
        self._on_evict = on_evict
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        # No lock on the hot path: each OrderedDict call is atomic under the GIL, and an
        # entry dropped between the two calls is simply not moved.
        value = self._items.get(key)
        if value is not None:
            try:  # noqa: SIM105 (cheaper than contextlib.suppress on the hot path)
                self._items.move_to_end(key)
            except KeyError:
                pass
        return value

    def put(self, key: Hashable, value: V) -> V:
        """Store `value` unless `key` already holds one; return the value held."""
        with self._lock:
            held = self._items.setdefault(key, value)
            self._items.move_to_end(key)
            dropped = []
            while len(self._items) > max(1, self._limit()):
                dropped.append(self._items.popitem(last=False)[1])
        for old in dropped:
            if self._on_evict is not None:
                self._on_evict(old)
        return held

    def remove_if(self, drop: Callable[[V], bool]) -> None:
        """Drop every entry whose value `drop` holds true for."""
        with self._lock:
            keys = [key for key, value in self._items.items() if drop(value)]
            dropped = [self._items.pop(key) for key in keys]
        for old in dropped:
            if self._on_evict is not None:
                self._on_evict(old)

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())

    def clear(self) -> None:
        with self._lock:
            dropped = list(self._items.values())
            self._items.clear()
        for old in dropped:
            if self._on_evict is not None:
                self._on_evict(old)

    def __len__(self) -> int:
        return len(self._items)
