"""Stand-ins for confluent-kafka's Message, Consumer and Producer, enough to drive record handlers in fuzz tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeMessage:
    """A consumed record."""

    value_: bytes | None
    headers_: Any = None
    key_: bytes | None = None
    topic_: str = "fz.retry.1s"
    partition_: int = 0
    offset_: int = 7

    def value(self) -> bytes | None:
        return self.value_

    def headers(self) -> Any:
        return self.headers_

    def key(self) -> bytes | None:
        return self.key_

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def error(self) -> None:
        return None


@dataclass
class FakeProducer:
    """Acknowledges every record at flush, and keeps (topic, value, headers) of each."""

    sent: list[tuple[str, bytes, Any]] = field(default_factory=list)
    _pending: list[Callable[[Any, Any], None]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes | None = None, key: Any = None, headers: Any = None,
                on_delivery: Callable[[Any, Any], None] | None = None, **_: Any) -> None:
        self.sent.append((topic, value or b"", headers))
        if on_delivery is not None:
            self._pending.append(on_delivery)

    def flush(self, _timeout: float = 0) -> int:
        for report in self._pending:
            report(None, None)
        self._pending.clear()
        return 0

    def poll(self, _timeout: float = 0) -> int:
        return self.flush()


@dataclass
class FakeConsumer:
    """Records pauses, seeks and commits."""

    commits: list[Any] = field(default_factory=list)
    paused: list[Any] = field(default_factory=list)

    def pause(self, partitions: list[Any]) -> None:
        self.paused.extend(partitions)

    def seek(self, _partition: Any) -> None:
        pass

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        self.commits.append(offsets)
