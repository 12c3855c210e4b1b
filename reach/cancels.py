"""Cancel records (pure): `<ns>.cancels` keyed by message_id, JSON `{message_id, tenant, by, at}`.

Written by the gateway (a caller's cancel, its app's tenant) and by `reach cancel` (an operator: any
tenant, `tenant` null). Agents follow the topic (reach.agent.cancelfeed) into a CancelBook: a message
not started yet is skipped with a terminal CANCELED receipt; a running handler sees `ctx.cancelled`.
The topic is time-retained (not compacted): a cancel matters only while its message can still run."""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reach.errors import ReachError

WINDOW_MS = 24 * 3600 * 1000  # how far back an agent reads, and how long it remembers: the topic's retention


class BadCancel(ReachError):
    """A record on the cancels topic that is not a cancel (skipped, never fatal)."""


class CancelRecord(BaseModel):
    """Cancel one message; `tenant` None (an operator) cancels it whatever its tenant."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_id: str = Field(min_length=1, max_length=200)
    tenant: str | None = Field(default=None, max_length=64)
    by: str = Field(default="", max_length=200)
    at: int = Field(ge=0)

    def encode(self) -> bytes:
        return self.model_dump_json().encode()


def decode(value: bytes | None) -> CancelRecord:
    try:
        return CancelRecord.model_validate_json(value or b"")
    except ValidationError as exc:
        raise BadCancel(f"not a cancel record: {exc.errors(include_url=False)[0]['msg']}") from None


class CancelBook:
    """The cancels seen within the window, by message id (thread-safe: the feed writes, handlers read)."""

    def __init__(self, window_ms: int = WINDOW_MS) -> None:
        self._window_ms = window_ms
        self._by_id: dict[str, CancelRecord] = {}
        self._lock = threading.Lock()

    def add(self, record: CancelRecord, now_ms: int) -> None:
        with self._lock:
            self._by_id[record.message_id] = record
            if len(self._by_id) % 1024 == 0:  # amortized pruning: the book never outgrows the window
                self._by_id = {k: r for k, r in self._by_id.items() if now_ms - r.at < self._window_ms}

    def cancelled(self, message_id: str, tenant: str) -> bool:
        """True when a cancel for this message (from its tenant, or an operator's) was seen."""
        with self._lock:
            record = self._by_id.get(message_id)
        return record is not None and record.tenant in (None, tenant)

    def __len__(self) -> int:
        return len(self._by_id)
