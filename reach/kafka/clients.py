"""Kafka client construction in one place (idempotent murmur2 producers, manual-commit consumers).

A bootstrap of `memory://<name>` builds the in-process clients of reach.kafka.memory instead (one bus per name):
the seam that runs the request path in a unit test with no broker."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from reach.core.commits import CommitLedger, TopicPart
from reach.errors import InfraUnavailable
from reach.kafka import kafkaerrors, memory
from reach.settings import ConsumerProfile, KafkaSettings, ProducerProfile

log = logging.getLogger(__name__)

_PROBE_S = 1.0  # one metadata attempt; between attempts the error callback is served


def admin(kafka: KafkaSettings, **overrides: Any) -> AdminClient:
    conf = kafka.admin(**overrides)
    bus = memory.bus_name(conf)
    return AdminClient(conf) if bus is None else cast(AdminClient, memory.MemoryAdmin(memory.bus(bus), conf))


def producer(kafka: KafkaSettings, *, profile: ProducerProfile = "hot", **overrides: Any) -> Producer:
    conf = kafka.producer(profile=profile, **overrides)
    bus = memory.bus_name(conf)
    return Producer(conf) if bus is None else cast(Producer, memory.MemoryProducer(memory.bus(bus), conf))


def consumer(group_id: str, kafka: KafkaSettings, *, profile: ConsumerProfile = "hot",
             **overrides: Any) -> Consumer:
    conf = kafka.consumer(group_id, profile=profile, **overrides)
    bus = memory.bus_name(conf)
    return Consumer(conf) if bus is None else cast(Consumer, memory.MemoryConsumer(memory.bus(bus), conf))


def assign(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    """Read `topic`'s partitions from the given offsets (partition -> offset, or types.OFFSET_BEGINNING), no group."""
    consumer.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])


def positions(consumer: Consumer, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """Where the consumer stands in each of `topic`'s `partitions` (the offset it reads next)."""
    return {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in partitions])}


def in_memory(kafka: KafkaSettings) -> bool:
    """True when `kafka` names an in-process bus (REACH_BOOTSTRAP=memory://<name>, reach.kafka.memory)."""
    return bool(kafka.bootstrap and kafka.bootstrap.startswith(memory.SCHEME))


def take(consumer: Consumer, max_messages: int, timeout: float, *, window_s: float = 0.0) -> list[Message]:
    """Wait up to `timeout` for one record, then drain what is already buffered without waiting; with a
    `window_s`, then wait up to that long more for the batch to fill to `max_messages`.

    `consume(n, timeout)` returns only when n records arrived or the timeout passed, so at low rates every
    hop waited ~timeout/2 for nothing (100 records at 25/s: p50 117 ms with consume(500, 0.2), 3.8 ms
    this way). Every consumer loop on the live path reads through here; batching stays in produce/commit.
    The window trades that much latency for fuller batches (decision 0053 measures it)."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    out = [first, *consumer.consume(max_messages - 1, 0)]
    if window_s > 0 and len(out) < max_messages:
        out += consumer.consume(max_messages - len(out), window_s)
    return out


def at_end(consumer: Consumer, topic: str, partitions: Iterable[TopicPart]) -> list[TopicPart]:
    """Those of `partitions` of `topic` whose position has reached the high watermark of the last fetch (local
    calls: no broker round trip)."""
    parts = [TopicPartition(t, p) for t, p in partitions if t == topic]
    out = []
    for tp in consumer.position(parts) if parts else []:
        _, high = consumer.get_watermark_offsets(tp, cached=True)
        if tp.offset >= 0 and high >= 0 and tp.offset >= high:
            out.append((tp.topic, tp.partition))
    return out


def send_commits(consumer: Consumer, ledger: CommitLedger, owned: Iterable[TopicPart] | None = None) -> None:
    """Send the ledger's commit, if none is in flight, for partitions this consumer still owns.

    Asynchronous; the answer arrives in `on_commit` (served inside poll/consume on the loop's thread). At most
    one commit is in flight per consumer (reach.core.commits), so commits never queue in front of heartbeats.
    `owned`, when the caller tracks its assignment, spares asking librdkafka (a round trip to its own thread,
    ~5% of the agent's and the router's Python time at 120 req/s)."""
    pending = ledger.take(time.monotonic())
    if not pending:
        return
    offsets = _owned(consumer, ledger, pending, owned)
    if not offsets:
        return
    try:
        consumer.commit(offsets=offsets, asynchronous=True)
    except KafkaException as exc:  # not even sent (no coordinator yet): sent again on the next call
        log.warning("commit of %d partition(s) failed (sent again): %s", len(offsets), exc)
        for tp in offsets:
            ledger.answered((tp.topic, tp.partition), tp.offset, ok=False)


def commit_now(consumer: Consumer, ledger: CommitLedger, partitions: Iterable[TopicPart] | None = None) -> None:
    """The final, synchronous commit before partitions are handed over or the consumer closes: every
    unconfirmed point (of `partitions`, else of all) that this consumer still owns, in flight or not."""
    wanted = ledger.unconfirmed()
    if partitions is not None:
        keep = set(partitions)
        wanted = {tp: o for tp, o in wanted.items() if tp in keep}
    offsets = _owned(consumer, ledger, wanted) if wanted else []
    if not offsets:
        return
    try:
        answers = consumer.commit(offsets=offsets, asynchronous=False) or []
    except KafkaException as exc:  # its new owner reads from the last confirmed commit: a redelivery, no loss
        log.warning("final commit of %d partition(s) failed: %s", len(offsets), exc)
        return
    on_commit(ledger, None, answers)


def on_commit(ledger: CommitLedger, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
    """The broker's answer to a commit: `on_commit` in the consumer's configuration, bound to its ledger."""
    for tp in partitions:
        ok = err is None and tp.error is None
        if not ok:
            log.warning("commit of %s[%d]@%d failed (sent again): %s", tp.topic, tp.partition, tp.offset,
                        err or tp.error)
        ledger.answered((tp.topic, tp.partition), tp.offset, ok=ok)


def _owned(consumer: Consumer, ledger: CommitLedger, wanted: dict[TopicPart, int],
           known: Iterable[TopicPart] | None = None) -> list[TopicPartition]:
    """`wanted` as TopicPartitions, without (and forgetting) the partitions this consumer no longer owns."""
    if known is not None:
        owned = set(known)
    else:
        try:
            owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        except KafkaException:  # the consumer is closing: nothing it could commit
            return []
    ledger.forget(wanted.keys() - owned)
    return [TopicPartition(t, p, o) for (t, p), o in wanted.items() if (t, p) in owned]


def check_reachable(client: AdminClient, timeout: float = 10.0, *, topic: str | None = None) -> None:
    """Raise InfraUnavailable (exit 4) when no broker answers a metadata request, within a second when the
    broker refuses the credentials (librdkafka would retry the login until `timeout`). With `topic` (one that
    exists) the request asks for that topic alone: the metadata of every topic of a large cluster is megabytes
    to parse, and an agent starting among a thousand others paid it (decision 0073)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        try:
            client.list_topics(topic=topic, timeout=min(_PROBE_S, max(deadline - time.monotonic(), 0.01)))
            return
        except Exception as exc:  # noqa: BLE001 - librdkafka reports unreachability as a generic KafkaException
            client.poll(0)  # serves the error callback, which records a refused login
            refused = kafkaerrors.failure_since(start)
            if refused is not None and kafkaerrors.is_tls(refused):
                raise InfraUnavailable(
                    f"Kafka TLS handshake failed: {refused}. Check REACH_SSL_CA_FILE (the PEM file of the CA that "
                    "signed the broker's certificate; `reach local status` prints it for `reach local up --tls`) and "
                    "REACH_SSL_CHECK_HOSTNAME."
                ) from None
            if refused is not None:
                raise InfraUnavailable(
                    f"Kafka authentication failed: {refused}. Check REACH_SASL_USERNAME, REACH_SASL_PASSWORD and "
                    "REACH_SASL_MECHANISM (or the REACH_SSL_* files) against the broker's listener."
                ) from None
            if time.monotonic() >= deadline:
                raise InfraUnavailable(
                    f"The Kafka broker does not answer ({exc}). Check REACH_BOOTSTRAP or run `reach local up`; a "
                    "broker that closes every connection may want TLS or SASL: check REACH_SECURITY_PROTOCOL."
                ) from None
