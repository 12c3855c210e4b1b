"""The route cache: recent resolutions by normalised intent and served set, dropped when the catalog changes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from reach.intent.stages import Resolution

CACHE_SIZE = 4_096


class RouteCache:
    """An LRU of resolutions for one catalog version; `hits` / `misses` count lookups."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, Resolution] = OrderedDict()
        self._version: object = None
        self.hits = 0
        self.misses = 0

    def get(self, phrase: Hashable, version: object) -> Resolution | None:
        if version != self._version:
            self._items.clear()
            self._version = version
        found = self._items.get(phrase)
        if found is None:
            self.misses += 1
            return None
        self._items.move_to_end(phrase)
        self.hits += 1
        return found

    def put(self, phrase: Hashable, resolution: Resolution) -> None:
        self._items[phrase] = resolution
        self._items.move_to_end(phrase)
        while len(self._items) > self._size:
            self._items.popitem(last=False)
