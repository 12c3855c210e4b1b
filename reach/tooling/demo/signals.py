"""Ctrl-C and SIGTERM as requests, not exceptions: the first ends the traffic, the second skips the drain.

Raising KeyboardInterrupt in the middle of starting a broker or spawning a child could lose track of
a process; instead every wait of the demo polls `requested` and the cleanup always runs in full.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Self

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequests:
    """Installs handlers for SIGINT, SIGTERM and SIGHUP while active (main thread only)."""

    def __init__(self, on_first: Callable[[str], None] | None = None) -> None:
        self.requested = threading.Event()
        self.hurry = threading.Event()
        self._on_first = on_first
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.requested.is_set():
            self.hurry.set()
            return
        self.requested.set()
        if self._on_first is not None:
            self._on_first(signal.Signals(signum).name)

    def __enter__(self) -> Self:
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
