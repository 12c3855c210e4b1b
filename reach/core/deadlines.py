"""What no agent sees, decided purely from status rows: spent budgets and delivery timeouts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from reach.core.lifecycle import StatusRow
from reach.records import Status


class Due(StrEnum):
    """What the timekeeper must do for a row."""

    EXPIRE = "expire"      # created_at -> deadline elapsed: EXPIRED, no dead letter
    REROUTE = "reroute"    # ROUTED but not STARTED within the delivery timeout


@dataclass(frozen=True)
class Task:
    """One row that needs action now; `mark` identifies the situation so it is acted on once."""

    due: Due
    row: StatusRow

    @property
    def mark(self) -> tuple[str, int, int, str]:
        at = self.row.delivery_due_at if self.due is Due.REROUTE else self.row.deadline
        return (self.row.message_id, self.row.generation, at or 0, self.due.value)


def due_tasks(rows: Iterable[StatusRow], now_ms: int) -> list[Task]:
    """Rows whose budget is spent (any non-terminal status), or ROUTED past their delivery timeout."""
    tasks = []
    for row in rows:
        if row.terminal:
            continue
        if row.deadline is not None and now_ms >= row.deadline:
            tasks.append(Task(Due.EXPIRE, row))
        elif (row.status is Status.ROUTED and row.delivery_due_at is not None and row.inbox is not None
              and now_ms >= row.delivery_due_at):
            tasks.append(Task(Due.REROUTE, row))
    return tasks
