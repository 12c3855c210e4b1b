"""A throwaway namespace for one bench run: its topics, envelope bytes, bursts, and reading topics back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from reach.envelopes import new_envelope, now_ms
from reach.kafka import clients, codec, topics
from reach.names import Names
from reach.settings import ConsumerProfile, KafkaSettings, ProducerProfile

BUDGET_MS = 120_000
"""Every bench envelope's total budget: by created_at + BUDGET_MS it has a terminal status (EXPIRED at worst)."""
PAYLOAD = {"text": "x" * 200}  # ~390-byte envelopes: the small request of docs/performance.md


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back: where it is, its key, value and broker timestamp (ms)."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int


class Workspace:
    """Namespace `bench<hex>` with topics.yaml applied; every mode makes its own topics inside it."""

    def __init__(self, *, kafka: KafkaSettings | None = None, topics_file: Path = Path("topics.yaml")) -> None:
        self.kafka = kafka or KafkaSettings()
        self.namespace = "bench" + uuid.uuid4().hex[:8]
        self.names = Names(self.namespace)
        self.topics_file = topics_file.resolve()
        self.spec = topics.load(topics_file)
        self.admin = clients.admin(self.kafka)
        clients.check_reachable(self.admin)
        topics.apply(self.admin, topics.plan(self.admin, self.spec.resolved(self.names)))
        self._template = new_envelope("bench.a", PAYLOAD).to_avro()
        self._sender: Producer | None = None

    def ensure(self, topic: str, family: str = "cap", **configs: str) -> str:
        """Create `topic` with the defaults of a topics.yaml family (cap: 4 partitions, agent: 2), plus `configs`."""
        spec = self.spec.family(family)  # type: ignore[arg-type]
        if configs:
            spec = spec.model_copy(update={"configs": {**spec.configs, **configs}})
        topics.ensure_topic(self.admin, topic, spec)
        return topic

    def ensure_sink(self, topic: str) -> str:
        """A forwarder's output topic, stamped by the broker on append (Quix keeps the input's timestamp)."""
        return self.ensure(topic, **{"message.timestamp.type": "LogAppendTime"})

    def envelope(self, message_id: str, capability: str, created_at: int | None = None, *,
                 idempotency_key: str | None = None) -> bytes:
        """A valid Envelope (the router decodes it; raw and faust forward its bytes unread); its business key is
        `idempotency_key`, else its own message id."""
        created = now_ms() if created_at is None else created_at
        return codec.encode_dict("Envelope", {
            **self._template, "message_id": message_id, "idempotency_key": idempotency_key or message_id,
            "trace_id": message_id,
            "capability": capability, "created_at": created, "deadline": created + BUDGET_MS,
        })

    def producer(self, *, profile: ProducerProfile = "hot", **overrides: Any) -> Producer:
        return Producer(self.kafka.producer(profile=profile, **overrides))

    def sender(self) -> Producer:
        """The open-loop senders' one producer, kept warm across steps: a new producer's first records wait
        for its connections and producer id (~300-600 ms here), which put every step's first ~1% of
        requests past the p99 bound and hid the knee."""
        if self._sender is None:
            self._sender = self.producer(profile="hot")
        return self._sender

    def burst(self, items: Iterable[tuple[str, str, bytes]]) -> int:
        """Produce (topic, key, value) records as fast as the client allows; returns how many."""
        producer = self.producer(profile="feed", **{"batch.num.messages": 2_000})
        n = 0
        for topic, key, value in items:
            while True:
                try:
                    producer.produce(topic, key=key.encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
            n += 1
            if n % 5_000 == 0:
                producer.poll(0)
        if producer.flush(60):
            raise RuntimeError("the burst was not acknowledged within 60 s")
        return n

    def consumer(self, *, profile: ConsumerProfile = "hot", **overrides: Any) -> Consumer:
        return Consumer(self.kafka.consumer(f"{self.namespace}.reader.{uuid.uuid4().hex[:6]}", profile=profile,
                                            **overrides))

    def end_offsets(self, topic_names: Iterable[str], consumer: Consumer) -> dict[tuple[str, int], int]:
        """High watermarks of every partition of the topics."""
        meta = consumer.list_topics(timeout=10).topics
        ends: dict[tuple[str, int], int] = {}
        for topic in topic_names:
            for p in meta[topic].partitions:
                ends[(topic, p)] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                                  cached=False)[1]
        return ends

    def read(self, topic_names: Iterable[str], *, start: dict[tuple[str, int], int] | None = None) -> list[Record]:
        """Every record from `start` (default: the beginning) up to the current end of each partition."""
        names = list(topic_names)
        consumer = self.consumer()
        try:
            ends = self.end_offsets(names, consumer)
            starts = start or {}
            todo = {tp: end for tp, end in ends.items() if end > starts.get(tp, 0)}
            consumer.assign([TopicPartition(t, p, starts.get((t, p), 0)) for (t, p) in todo])
            out: list[Record] = []
            while todo:
                for msg in consumer.consume(1_000, timeout=1.0):
                    if msg.error() is not None:
                        continue
                    tp = (msg.topic() or "", msg.partition() or 0)
                    out.append(Record(tp[0], tp[1], msg.key(), msg.value(), msg.timestamp()[1]))
                    if tp in todo and (msg.offset() or 0) + 1 >= todo[tp]:
                        del todo[tp]
            return out
        finally:
            consumer.close()

    def delete(self, attempts: int = 3) -> list[str]:
        """Drop the run's topics, checking they are gone (a busy broker times requests out); returns what is left.

        Best effort: a bench must not leave hundreds of partitions behind, nor fail a run for it."""
        prefix, left = self.namespace + ".", []
        for attempt in range(attempts):
            try:
                left = [t for t in self.admin.list_topics(timeout=30).topics if t.startswith(prefix)]
                if not left:
                    return []
                for future in self.admin.delete_topics(left, operation_timeout=60).values():
                    try:
                        future.result()
                    except Exception:  # noqa: BLE001, S110 - listed again on the next attempt
                        pass
            except Exception:  # noqa: BLE001, S110 - the broker did not answer in time: try again
                pass
            time.sleep(1.0 * (attempt + 1))
        try:
            return [t for t in self.admin.list_topics(timeout=30).topics if t.startswith(prefix)]
        except Exception:  # noqa: BLE001 - unknown: report what the last listing showed
            return left


def message_id(mode: str, seq: int) -> str:
    return f"{mode}-{seq:08d}"


def seq_of(mid: str) -> int:
    return int(mid.rsplit("-", 1)[1])


def envelopes(ws: Workspace, mode: str, topic: str, capability: str | list[str], count: int,
              created: dict[str, int]) -> Iterator[tuple[str, str, bytes]]:
    """(topic, key, value) of `count` envelopes keyed by message_id; records each created_at in `created`."""
    caps = [capability] if isinstance(capability, str) else capability
    for seq in range(count):
        mid = message_id(mode, seq)
        cap = caps[seq % len(caps)]
        at = now_ms()
        created[mid] = at
        yield (topic if topic else ws.names.capability(cap)), mid, ws.envelope(mid, cap, at)
