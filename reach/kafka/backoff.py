"""When a paused input partition may be read again: a delay per partition that doubles on each failure, capped.

Pure. reach.kafka.worker pauses a partition whose outputs were not all acknowledged, seeks it back to its first
such record and resumes it once `due`; a batch of the partition that is acknowledged clears its delay."""

from __future__ import annotations

TopicPart = tuple[str, int]


class PartitionBackoff:
    """When each input partition whose records were not acknowledged may be read again (doubling, capped)."""

    def __init__(self, *, first_s: float = 0.1, most_s: float = 5.0) -> None:
        self._first, self._most = first_s, most_s
        self._delay: dict[TopicPart, float] = {}
        self._until: dict[TopicPart, float] = {}

    def hold(self, tp: TopicPart, now: float) -> float:
        """Hold a partition after a failure; returns how long."""
        delay = min(self._delay.get(tp, self._first / 2) * 2, self._most)
        self._delay[tp], self._until[tp] = delay, now + delay
        return delay

    def hold_for(self, tp: TopicPart, now: float, seconds: float) -> None:
        """Hold a partition for `seconds` because its head record is not due yet (no failure: the delay stays)."""
        self._until[tp] = now + seconds

    def next_due(self) -> float | None:
        """When the first held partition is due (None: none is held)."""
        return min(self._until.values(), default=None)

    def cleared(self, tp: TopicPart) -> None:
        """A batch of the partition was acknowledged: the next failure starts from the first delay again."""
        self._delay.pop(tp, None)

    def forget(self, tps: list[TopicPart]) -> None:
        """Partitions this consumer no longer owns (revoked or lost): nothing to resume."""
        for tp in tps:
            self._delay.pop(tp, None)
            self._until.pop(tp, None)

    def held(self) -> list[TopicPart]:
        """Partitions paused and not due yet."""
        return list(self._until)

    def due(self, now: float) -> list[TopicPart]:
        """Held partitions whose wait is over (each returned once)."""
        ready = [tp for tp, until in self._until.items() if until <= now]
        for tp in ready:
            del self._until[tp]
        return ready
