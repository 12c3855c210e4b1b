"""Per input record, whether everything it caused is acknowledged; commits stop at the first record that is not.

A loop that reads a batch and produces records for it (forwards, receipts, dead letters) asks
`expect(position)` for a delivery callback per produced record. After the flush, `commits()` gives
per input partition the offset to commit: just past the last record whose outputs were all
acknowledged, and never past the first one that was not (refused, still queued, or failed to
produce). `rewinds()` gives where each such partition must be read again. One failure thus costs its
own partition from that record on, never the other partitions of the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Position = tuple[str, int, int]
"""(topic, partition, offset) of an input record."""


@dataclass
class _Input:
    pending: int = 0
    errors: list[Any] = field(default_factory=list)


class Acks:
    """The acknowledgement ledger of one batch (pure: error objects are passed through, never inspected)."""

    def __init__(self) -> None:
        self._inputs: dict[tuple[str, int], dict[int, _Input]] = {}

    def seen(self, position: Position) -> None:
        """Register an input record; one that causes nothing is done as soon as it is seen."""
        self._entry(position)

    def _entry(self, position: Position) -> _Input:
        topic, partition, offset = position
        records = self._inputs.get((topic, partition))
        if records is None:
            records = self._inputs[(topic, partition)] = {}
        entry = records.get(offset)
        if entry is None:
            entry = records[offset] = _Input()
        return entry

    def expect(self, position: Position) -> Callable[[Any, Any], None]:
        """A delivery callback `(err, msg)` for one record produced on behalf of `position`."""
        entry = self._entry(position)
        entry.pending += 1

        def report(err: Any, _msg: Any) -> None:
            entry.pending -= 1
            if err is not None:
                entry.errors.append(err)

        return report

    def fail(self, position: Position, error: Any) -> None:
        """An output of `position` could not even be produced (a synchronous produce error)."""
        self._entry(position).errors.append(error)

    def reset(self, position: Position) -> None:
        """Forget what `position` caused so far (it is about to be dead-lettered instead)."""
        topic, partition, offset = position
        self._inputs.setdefault((topic, partition), {})[offset] = _Input()

    def _first_unacked(self, records: dict[int, _Input]) -> int | None:
        return next((o for o in sorted(records) if records[o].pending or records[o].errors), None)

    def commits(self) -> dict[tuple[str, int], int]:
        """Per input partition, the offset to commit (exclusive); absent when its first record is unacked."""
        out: dict[tuple[str, int], int] = {}
        for tp, records in self._inputs.items():
            first = self._first_unacked(records)
            if first is None:
                out[tp] = max(records) + 1
            elif first > min(records):
                out[tp] = first
        return out

    def rewinds(self) -> dict[tuple[str, int], int]:
        """Per input partition with an unacknowledged record, the offset to read again from."""
        out: dict[tuple[str, int], int] = {}
        for tp, records in self._inputs.items():
            first = self._first_unacked(records)
            if first is not None:
                out[tp] = first
        return out

    def errors(self, position: Position) -> list[Any]:
        """The errors reported for one input record (empty when none, or still pending)."""
        topic, partition, offset = position
        entry = self._inputs.get((topic, partition), {}).get(offset)
        return list(entry.errors) if entry else []

    def unacked(self) -> list[Position]:
        """Every input record with an output refused, failed or not yet acknowledged, in offset order."""
        return [(t, p, o) for (t, p), records in self._inputs.items() for o in sorted(records)
                if records[o].pending or records[o].errors]
