"""A dependency's outage, pure: after a failure it is skipped for a backoff that doubles up to a ceiling."""

from __future__ import annotations

import time
from collections.abc import Callable


class Outage:
    """`available()` is False while backing off; `failed()` doubles the wait, `recovered()` resets it."""

    def __init__(self, *, base_s: float = 0.5, max_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._base_s = base_s
        self._max_s = max_s
        self._clock = clock
        self._delay_s = 0.0
        self._until = 0.0

    def available(self) -> bool:
        return self._clock() >= self._until

    @property
    def down(self) -> bool:
        """True from the first failure until the next success."""
        return self._delay_s > 0

    def failed(self) -> None:
        self._delay_s = min(self._max_s, self._delay_s * 2 if self._delay_s else self._base_s)
        self._until = self._clock() + self._delay_s

    def recovered(self) -> None:
        self._delay_s = 0.0
        self._until = 0.0
