"""The route cache: recent resolutions by normalised intent, dropped whenever the catalog or the map changes."""

from __future__ import annotations

from collections import OrderedDict

from reach.intent.stages import Resolution

CACHE_SIZE = 4_096


class RouteCache:
    """An LRU of resolutions for one catalog version; `hits` / `misses` count lookups."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._items: OrderedDict[str, Resolution] = OrderedDict()
        self._version: object = None
        self.hits = 0
        self.misses = 0

    def get(self, phrase: str, version: object) -> Resolution | None:
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

    def put(self, phrase: str, resolution: Resolution) -> None:
        self._items[phrase] = resolution
        self._items.move_to_end(phrase)
        while len(self._items) > self._size:
            self._items.popitem(last=False)
