"""Open-loop traffic at a fixed rate (a send never waits for an earlier one) and a tail of the receipt log."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from reach.envelopes import new_envelope, now_ms, routing_key
from reach.kafka import clients, codec
from reach.kafka import headers as h
from reach.records import Receipt
from reach.settings import KafkaSettings
from reach.tooling.faults.checker import Seen, Sent

BUDGET_MS = 180_000  # room for the longest fault plus its drain: an expiry would hide what a fault did


class Traffic:
    """Produces one envelope every 1/rate s from a thread; records send time and broker acknowledgement."""

    def __init__(self, *, kafka: KafkaSettings, topic: str, capability: str, rate: float,
                 extra: Callable[[int], tuple[str, bytes] | None] | None = None) -> None:
        self.topic, self.capability, self.rate = topic, capability, rate
        # log_level 2: a killed broker's connection-refused lines are the fault itself, not news
        self._producer = Producer(kafka.producer(profile="hot", **{"message.timeout.ms": 120_000, "log_level": 2}))
        self._extra = extra  # e.g. poison: (key, raw bytes) to send beside envelope n
        self._sent: dict[str, int] = {}
        self._acked: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="faults-traffic", daemon=True)
        self._thread.start()

    def stop(self, flush_s: float = 120.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._producer.flush(flush_s)

    def sent(self) -> list[Sent]:
        with self._lock:
            return [Sent(m, at, m in self._acked) for m, at in self._sent.items()]

    def _run(self) -> None:
        start, n = time.monotonic(), 0
        while not self._stop.is_set():
            due = start + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
                continue
            env = new_envelope(self.capability, {"n": n}, budget_ms=BUDGET_MS, source="reach-faults")
            self._produce(env.message_id, routing_key(env), codec.encode(env))
            extra = self._extra(n) if self._extra else None
            if extra is not None:
                self._produce(extra[0], extra[0], extra[1])
            n += 1
            self._producer.poll(0)

    def _produce(self, message_id: str, key: str, value: bytes) -> None:
        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                with self._lock:
                    self._acked.add(message_id)

        with self._lock:
            self._sent[message_id] = now_ms()
        while True:
            try:
                self._producer.produce(self.topic, value, key=key.encode(), on_delivery=delivered,
                                       headers=[(h.MESSAGE_ID, message_id.encode())])
                return
            except BufferError:  # the local queue is full while the cluster is down: wait for room
                self._producer.poll(0.1)


class ReceiptTail:
    """Reads the whole receipts topic from the beginning in a thread, keeping what the checker needs."""

    def __init__(self, *, kafka: KafkaSettings, topic: str) -> None:
        self._consumer = Consumer(kafka.consumer(f"reach-faults-tail-{now_ms()}", log_level=2))
        meta = self._consumer.list_topics(topic, timeout=15).topics[topic]
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        self._seen: list[Seen] = []
        self.undecodable = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-receipts", daemon=True)
        self._thread.start()

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in clients.take(self._consumer, 500, 0.2):
                value = msg.value()
                if msg.error() or value is None:
                    continue
                try:
                    r = codec.decode(value, Receipt)
                except Exception:  # noqa: BLE001 - counted: a receipt we cannot read is reported, never fatal
                    self.undecodable += 1
                    continue
                with self._lock:
                    self._seen.append(Seen(r.message_id, r.generation, str(r.status), r.at, _outcome(r)))


def _outcome(r: Receipt) -> str:
    """What tells two terminal receipts apart: the result bytes, or the error code."""
    if r.result is not None:
        return hashlib.blake2b(r.result, digest_size=8).hexdigest()
    return r.error.code if r.error is not None else ""
