"""Per-partition offset tracking: the commit point is the prefix of offsets whose work is fully acknowledged.

What is sent, in flight and confirmed is the consumer's commit ledger's (reach.core.commits)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class _Partition:
    __slots__ = ("pending", "taken", "done", "commit")

    def __init__(self) -> None:
        self.pending: deque[int] = deque()
        self.taken: set[int] = set()
        self.done: set[int] = set()
        self.commit: int | None = None      # next offset to read, once everything before it is acknowledged


class OffsetTracker:
    """Offsets arrive in order per partition and finish in any order; the commit point never skips one."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}
        self._moved: set[int] = set()  # partitions whose commit point moved since advanced() was last asked

    def add(self, partition: int, offset: int) -> None:
        """Record that `offset` was taken from `partition` and is being worked on."""
        part = self._parts.setdefault(partition, _Partition())
        if part.pending and offset <= part.pending[-1]:
            raise ValueError(f"offset {offset} on partition {partition} is not after {part.pending[-1]}")
        part.pending.append(offset)
        part.taken.add(offset)

    def done(self, partition: int, offset: int) -> None:
        """Record that everything `offset` caused is acknowledged; advances the commit point if possible."""
        part = self._parts.get(partition)
        if part is None or offset not in part.taken:
            return  # revoked meanwhile (its new owner redoes the work), or a stale run's completion
        part.done.add(offset)
        while part.pending and part.pending[0] in part.done:
            first = part.pending.popleft()
            part.done.discard(first)
            part.taken.discard(first)
            part.commit = first + 1
            self._moved.add(partition)

    def advanced(self) -> dict[int, int]:
        """Commit points that moved since the last call: {partition: next offset to read}."""
        out = {p: c for p in self._moved if (part := self._parts.get(p)) is not None and (c := part.commit) is not None}
        self._moved.clear()
        return out

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop revoked or lost partitions (their uncommitted offsets are redelivered elsewhere)."""
        for partition in partitions:
            self._parts.pop(partition, None)
            self._moved.discard(partition)

    def pending(self, partition: int | None = None) -> int:
        """Offsets taken and not yet done (on one partition, or on all)."""
        parts = self._parts.values() if partition is None else [self._parts.get(partition) or _Partition()]
        return sum(len(p.pending) - len(p.done) for p in parts)
