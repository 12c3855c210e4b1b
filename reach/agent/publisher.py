"""A producer whose sends return futures resolved by the broker's acknowledgement (never raising)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from reach.agent.exceptions import DeliveryFailed, RecordRefused
from reach.kafka.headers import Headers
from reach.kafka.types import KafkaError, KafkaException, Message, Producer

# Errors about one record (its size, its bytes): that record fails; anything else is the broker's (infrastructure).
_RECORD_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG,
                  KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError._INVALID_ARG,
                  KafkaError._BAD_MSG}


class Sender(Protocol):
    """The SDK's one way to produce: a future per record, failing with DeliveryFailed or RecordRefused."""

    def send(self, topic: str, key: str, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None) -> Future[Message]: ...


def refusal(topic: str, err: KafkaError) -> DeliveryFailed:
    """The error a failed send resolves with: RecordRefused for a bad record, DeliveryFailed otherwise."""
    cls = RecordRefused if err.code() in _RECORD_ERRORS else DeliveryFailed
    return cls(f"{topic}: the broker did not acknowledge a record: {err}")


def when_acked(acks: list[Future[Message]], then: Callable[[BaseException | None], None]) -> None:
    """Call `then` once, after every ack is in, with the first failure (None when all succeeded).

    Never on the last ack alone: a failure that came earlier must stop the commit (the offset stays)."""
    if not acks:
        then(None)
        return
    if len(acks) == 1:  # most messages now: the terminal receipt alone (reach.agent.startgate)
        acks[0].add_done_callback(lambda future: then(future.exception()))
        return
    pending = [len(acks)]
    failed: list[BaseException] = []
    lock = threading.Lock()

    def acked(future: Future[Message]) -> None:
        error = future.exception()
        with lock:
            pending[0] -= 1
            if error is not None:
                failed.append(error)
            last, first = pending[0] == 0, (failed[0] if failed else None)
        if last:
            then(first)

    for ack in acks:
        ack.add_done_callback(acked)


class Publisher:
    """Thread-safe sends; a background thread serves delivery callbacks so acks resolve promptly."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="reach-acks", daemon=True)
        self._thread.start()

    def send(self, topic: str, key: str, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None) -> Future[Message]:
        """Produce one record; the future resolves when the broker acknowledged it (acks=all)."""
        future: Future[Message] = Future()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                future.set_exception(refusal(topic, err))
            else:
                future.set_result(msg)

        kwargs: dict[str, Any] = {"key": key.encode(), "value": value, "headers": headers or [],
                                  "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return future
            except BufferError:  # local queue full: let the acks thread drain it
                self._producer.poll(0.05)
            except KafkaException as exc:  # refused before queueing (e.g. over message.max.bytes)
                future.set_exception(refusal(topic, exc.args[0]))
                return future

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for every outstanding record; returns how many are still unacknowledged."""
        return int(self._producer.flush(timeout))

    def close(self, timeout: float = 30.0) -> int:
        """Flush, then stop the acks thread."""
        left = self.flush(timeout)
        self._stop.set()
        self._thread.join(timeout=5)
        return left

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)
