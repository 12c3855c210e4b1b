"""Per-partition offset tracking: commit only the prefix of offsets whose work is fully acknowledged."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class _Partition:
    __slots__ = ("pending", "taken", "done", "commit", "sent", "committed")

    def __init__(self) -> None:
        self.pending: deque[int] = deque()
        self.taken: set[int] = set()
        self.done: set[int] = set()
        self.commit: int | None = None      # next offset to read, once everything before it is acknowledged
        self.sent: int | None = None        # a commit handed out by take_commits() and not yet answered
        self.committed: int | None = None   # the last commit the broker confirmed


class OffsetTracker:
    """Offsets arrive in order per partition and finish in any order; the commit point never skips one."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

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

    def take_commits(self) -> dict[int, int]:
        """Commit points to send now: {partition: next offset to read}.

        A point is handed out again until the broker confirms it (`committed`), so a failed commit on a
        partition that then goes idle is retried instead of forgotten."""
        out: dict[int, int] = {}
        for partition, part in self._parts.items():
            if part.commit is not None and part.commit not in (part.committed, part.sent):
                out[partition] = part.commit
                part.sent = part.commit
        return out

    def committed(self, partition: int, offset: int) -> None:
        """The broker confirmed a commit of `offset` (the next offset to read) on `partition`."""
        part = self._parts.get(partition)
        if part is not None and (part.committed is None or offset > part.committed):
            part.committed = offset
            if part.sent is not None and part.sent <= offset:
                part.sent = None

    def commit_failed(self, partition: int, offset: int) -> None:
        """A commit of `offset` failed: hand it out again on the next `take_commits`."""
        part = self._parts.get(partition)
        if part is not None and part.sent == offset:
            part.sent = None

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop revoked or lost partitions (their uncommitted offsets are redelivered elsewhere)."""
        for partition in partitions:
            self._parts.pop(partition, None)

    def pending(self, partition: int | None = None) -> int:
        """Offsets taken and not yet done (on one partition, or on all)."""
        parts = self._parts.values() if partition is None else [self._parts.get(partition) or _Partition()]
        return sum(len(p.pending) - len(p.done) for p in parts)
