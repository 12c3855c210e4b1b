"""reply_to bookkeeping: where the first terminal receipt of each (message, generation) goes.

The hot loop remembers an envelope's reply_to when it reads it; the state loop forwards the first
terminal receipt it sees for that (message_id, generation) and forgets the entry, so later
terminals are not forwarded again. Limits (documented in docs/decisions/0001): the table lives in
the worker that routed the message, so a receipt that arrives after that worker restarted is not
forwarded (the caller's `invoke` times out and can look the message up with `reach status`), and
entries of messages that never end are dropped after their deadline plus a grace period.
"""

from __future__ import annotations

import threading

GRACE_MS = 60_000


class ReplyBook:
    """(message_id, generation) -> (reply_to, forget_at)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int], tuple[str, int]] = {}

    def remember(self, message_id: str, generation: int, reply_to: str, forget_at: int) -> None:
        with self._lock:
            self._entries.setdefault((message_id, generation), (reply_to, forget_at + GRACE_MS))

    def take(self, message_id: str, generation: int) -> str | None:
        """The reply topic of a first terminal receipt; None when unknown or already answered."""
        with self._lock:
            entry = self._entries.pop((message_id, generation), None)
        return entry[0] if entry else None

    def prune(self, now_ms: int) -> int:
        with self._lock:
            stale = [k for k, (_, forget_at) in self._entries.items() if forget_at < now_ms]
            for key in stale:
                del self._entries[key]
        return len(stale)

    def __len__(self) -> int:
        return len(self._entries)
