"""The router's hot path: a confluent-kafka consumer on every capability topic of the namespace.

Per batch: consume up to `batch_size` envelopes, decode only the routing fields, decide (pure
`reach.routing.decide`), then produce forwards of the original bytes, dead letters and the receipts
that do not need an offset, and flush once. Each ROUTED receipt carries the inbox offset, so it is
produced from its forward's delivery report, which runs inside that flush; the flush returns when
the receipts are acknowledged too. Only then are the batch's offsets committed.
A refused record rewinds the batch (it is routed again: at least once, never lost).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from reach import clients, dlq
from reach import headers as H
from reach.candidates import RouteRequest
from reach.codec import DecodeError, UnknownSchema, decode_dict, encode_dict
from reach.envelopes import MAX_PAYLOAD_BYTES, now_ms
from reach.names import Names
from reach.records import AgentRegistration, Status, Weights
from reach.routing import Expired, Forward, NoRoute, Overload, Reject, RouteOutcome, decide, parse_request
from reach.settings import KafkaSettings, ReachSettings
from reach.streams.affinity import AffinityTable
from reach.streams.exceptions import DeliveryFailed
from reach.streams.routed_receipt import RoutedReceiptWriter
from reach.streams.state import RouterState, StateLoop
from reach.streams.stats import RouterStats

log = logging.getLogger("reach.router")

MAX_ENVELOPE_BYTES = MAX_PAYLOAD_BYTES + 64 * 1024
"""Envelopes above this size are REJECTED (OVERSIZE): the payload limit plus room for the routing fields."""


def router_group(names: Names) -> str:
    """The hot path's consumer group; the faust app itself is group `<ns>.router` (its app id)."""
    return f"{names.router_app_id}.capabilities"


class CapabilityTopics:
    """The explicit subscription to every capability topic, refreshed from metadata.

    librdkafka's regex subscription misses a topic created while the group rebalances (a new
    worker joining) until some later topic appears (librdkafka#3008): with two workers a new
    capability waited a minute or more. Comparing the matching topics with the subscription every
    `every_s` and re-subscribing when they differ always converges, whatever the group was doing."""

    def __init__(self, names: Names, every_s: float) -> None:
        self.prefix = names.capability_prefix
        self.every_s = every_s
        self.subscribed: frozenset[str] = frozenset()
        self._checked = 0.0

    def refresh(self, consumer: Consumer, now: float) -> bool:
        """Re-subscribe when the matching topics changed; True while subscribed to at least one."""
        if now - self._checked >= self.every_s:
            self._checked = now
            topics = frozenset(t for t in consumer.list_topics(timeout=5).topics if t.startswith(self.prefix))
            if topics and topics != self.subscribed:
                consumer.subscribe(sorted(topics))
                log.info("subscribed to %d capability topic(s): %s", len(topics), ", ".join(sorted(topics)))
                self.subscribed = topics
        return bool(self.subscribed)


class _Slot:
    """Delivery report of one forwarded envelope: on success, `acked` writes its ROUTED receipt at once."""

    __slots__ = ("acked", "error", "offset", "partition")

    def __init__(self, acked: Callable[[_Slot], None]) -> None:
        self.acked = acked
        self.partition: int | None = None
        self.offset: int | None = None
        self.error: str | None = None

    def __call__(self, err: Any, msg: Message) -> None:
        if err is not None:
            self.error = str(err)
        else:
            self.partition, self.offset = msg.partition(), msg.offset()
            self.acked(self)


@dataclass
class _Batch:
    """What one consumed batch caused, and how far each input partition got."""

    routed: list[_Slot] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    first: dict[tuple[str, int], int] = field(default_factory=dict)
    last: dict[tuple[str, int], int] = field(default_factory=dict)
    capabilities: dict[str, tuple[Weights, bool]] = field(default_factory=dict)  # weights, validate_at_router

    def report(self, err: Any, _msg: Message) -> None:
        if err is not None:
            self.errors.append(str(err))


class Router:
    """The routing worker: start()/stop() from any thread; several workers share the capability topics."""

    def __init__(
        self,
        *,
        kafka: KafkaSettings | None = None,
        reach: ReachSettings | None = None,
        batch_size: int = 500,
        metadata_refresh_ms: int = 2_000,
        retry_after_ms: int = 1_000,
        rng: random.Random | None = None,
    ) -> None:
        self.kafka = kafka or KafkaSettings()
        self.settings = reach or ReachSettings()
        self.names = Names(self.settings.namespace)
        self.state = RouterState()
        self.stats = RouterStats()
        self.affinity = AffinityTable()
        self._batch_size = batch_size
        self._metadata_refresh_ms = metadata_refresh_ms
        self._retry_after_ms = retry_after_ms
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self.worker_id = uuid.uuid4().hex[:12]
        self._routed_writer = RoutedReceiptWriter.create()
        self._routed_headers = [(H.ROUTER, self.worker_id.encode())]
        self._state_loop = StateLoop(state=self.state, names=self.names, kafka=self.kafka, router_id=self.worker_id)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.on_batch: Callable[[int], None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, *, ready_timeout: float | None = 30.0) -> None:
        """Start the state loop and the hot loop; with a timeout, wait until the registry is loaded."""
        self._state_loop.start()
        self._thread = threading.Thread(target=self._run, name="reach-router", daemon=True)
        self._thread.start()
        if ready_timeout is not None:
            self._state_loop.wait_ready(ready_timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Finish the current batch, leave the group, close the clients."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._state_loop.stop(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def healthy(self) -> bool:
        return self.running and self._state_loop.error is None and self.error is None

    def __enter__(self) -> Router:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the hot loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if not self.state.ready.wait(0.5):
                    continue
                self._loop()
                return
            except KafkaException as exc:  # a fresh consumer resumes from the last committed offsets
                log.warning("router loop restarting in %.1fs: %s", backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except BaseException as exc:  # noqa: BLE001 - surfaced through .error / healthy()
                self.error = exc
                log.exception("router stopped")
                return

    def _loop(self) -> None:
        conf = self.kafka.consumer(
            router_group(self.names),
            **{
                "topic.metadata.refresh.interval.ms": self._metadata_refresh_ms,
                "session.timeout.ms": 6_000,
                "heartbeat.interval.ms": 1_500,
                "partition.assignment.strategy": "roundrobin",
            },
        )
        consumer = Consumer(conf)
        producer = Producer(self.kafka.producer())
        capabilities = CapabilityTopics(self.names, self._metadata_refresh_ms / 1000)
        backoff = 0.1
        try:
            while not self._stop.is_set():
                if not capabilities.refresh(consumer, time.monotonic()):
                    self._stop.wait(0.2)
                    continue
                messages = clients.take(consumer, self._batch_size, 0.2)
                if not messages:
                    producer.poll(0)
                    continue
                try:
                    commits = self._process(messages, producer)
                except DeliveryFailed as exc:
                    log.warning("rewinding a batch of %d: %s", len(messages), exc)
                    self._rewind(consumer, messages)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.1
                if commits:
                    consumer.commit(offsets=commits, asynchronous=True)
                if self.on_batch is not None:
                    self.on_batch(len(messages))
        finally:
            producer.flush(10)
            consumer.close()

    @staticmethod
    def _rewind(consumer: Consumer, messages: list[Message]) -> None:
        first: dict[tuple[str, int], int] = {}
        for msg in messages:
            tp = (msg.topic() or "", msg.partition() or 0)
            if msg.error() is None and tp not in first:
                first[tp] = msg.offset() or 0
        for (topic, partition), offset in first.items():
            consumer.seek(TopicPartition(topic, partition, offset))

    def _process(self, messages: list[Message], producer: Producer) -> list[TopicPartition]:
        batch = _Batch()
        now = now_ms()
        live = self.state.live(now)
        loads = self.state.loads.loads(live)
        by_capability: dict[str, list[AgentRegistration]] = {}
        for reg in live:  # select() filters by capability anyway; this keeps its loop to the instances that can match
            for name in {c.name for c in reg.capabilities}:
                by_capability.setdefault(name, []).append(reg)
        disabled = self.state.control.disabled()
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("capability consumer: %s", err)
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            offset = msg.offset() or 0
            batch.first.setdefault(tp, offset)
            batch.last[tp] = offset
            value = msg.value()
            if value is None:
                continue  # a tombstone on a capability topic carries no request
            try:
                self._route_one(msg, value, producer, batch, live=by_capability, loads=loads, disabled=disabled,
                                now=now)
            except (BufferError, DeliveryFailed):
                raise
            except Exception as exc:  # noqa: BLE001 - a router bug must not block the partition
                log.exception("routing %s[%d]@%d failed", tp[0], tp[1], offset)
                self._reject(msg, value, None, Reject("ROUTER_ERROR", repr(exc)), producer, batch, now)
        self._flush(producer, batch)  # forwards, and the ROUTED receipts their delivery reports produce
        return [TopicPartition(t, p, o + 1) for (t, p), o in batch.last.items()]

    def _flush(self, producer: Producer, batch: _Batch) -> None:
        remaining = producer.flush(30)
        if remaining:
            raise DeliveryFailed(f"{remaining} records not acknowledged within 30s")
        batch.errors.extend(slot.error for slot in batch.routed if slot.error is not None)
        if batch.errors:
            raise DeliveryFailed("; ".join(sorted(set(batch.errors))[:3]))

    def _route_one(
        self,
        msg: Message,
        value: bytes,
        producer: Producer,
        batch: _Batch,
        *,
        live: dict[str, list[AgentRegistration]],
        loads: dict[str, int],
        disabled: frozenset[str],
        now: int,
    ) -> None:
        try:
            envelope = decode_dict("Envelope", value)
        except DecodeError as exc:
            code = "UNKNOWN_SCHEMA" if isinstance(exc, UnknownSchema) else "UNDECODABLE"
            self._reject(msg, value, None, Reject(code, str(exc)), producer, batch, now)
            return
        parsed = parse_request(envelope)
        if isinstance(parsed, Reject):
            self._reject(msg, value, envelope, parsed, producer, batch, now)
            return
        request = parsed
        if len(value) > MAX_ENVELOPE_BYTES:
            reject = Reject("OVERSIZE", f"envelope is {len(value):,} bytes; the limit is {MAX_ENVELOPE_BYTES:,}")
            self._reject(msg, value, envelope, reject, producer, batch, now)
            return
        reply = self._reply_header(envelope)
        settings = batch.capabilities.get(request.capability)
        if settings is None:
            control = self.state.control
            settings = (control.weights(request.capability), control.policy(request.capability).validate_at_router)
            batch.capabilities[request.capability] = settings
        weights, validate = settings
        sticky = self.affinity.get(request.session_key, now)
        outcome: RouteOutcome = decide(
            request,
            live.get(request.capability, ()),
            weights=weights,
            now_ms=now,
            loads=loads,
            disabled=disabled,
            affinity={request.session_key: sticky} if request.session_key and sticky else None,
            rng=self._rng,
            payload=envelope["payload"] if validate else None,
            retry_after_ms=self._retry_after_ms,
        )
        if isinstance(outcome, Forward):
            instance = outcome.instance
            slot = _Slot(lambda acked: self._produce_routed(producer, batch, request, outcome, acked, reply))
            producer.produce(
                outcome.topic,
                partition=outcome.partition,
                key=msg.key(),
                value=value,
                headers=msg.headers(),
                on_delivery=slot,
            )
            loads[instance.instance_id] = loads.get(instance.instance_id, instance.inflight) + 1
            self.state.loads.routed((request.message_id, request.generation, request.attempt),
                                    instance.instance_id, now)
            self.affinity.set(request.session_key, instance.instance_id, now)
            batch.routed.append(slot)
            self.stats.count(request.capability, "routed")
        elif isinstance(outcome, Overload):
            receipt = _receipt(request, Status.FAILED, now, error=_error("OVERLOAD", "OVERLOAD",
                               "every candidate is above 80% of its max_concurrency; retry later"),
                               retry_after_ms=outcome.retry_after_ms,
                               decision={"candidates": [s.as_dict() for s in outcome.scores],
                                         "weights": _weights(outcome.weights)})
            self._produce_receipt(producer, batch, receipt, reply)
            self.stats.count(request.capability, "overload")
        elif isinstance(outcome, NoRoute):
            if outcome.dead_letter:
                self._dead_letter(msg, value, envelope, "NO_ROUTE", _error("NO_ROUTE", "NO_ROUTE", outcome.message),
                                  producer, batch, now)
                status, counter = Status.DEAD_LETTERED, "dead_lettered"
            else:
                status, counter = Status.UNROUTABLE, "unroutable"
            receipt = _receipt(request, status, now, error=_error("NO_ROUTE", "NO_ROUTE", outcome.message))
            self._produce_receipt(producer, batch, receipt, reply)
            self.stats.count(request.capability, counter)
        elif isinstance(outcome, Expired):
            receipt = _receipt(request, Status.EXPIRED, now, error=_error("TIMEOUT", "BUDGET_SPENT", outcome.message))
            self._produce_receipt(producer, batch, receipt, reply)
            self.stats.count(request.capability, "expired")
        else:
            self._reject(msg, value, envelope, outcome, producer, batch, now)

    # -- records -------------------------------------------------------------------------------------

    def _reply_header(self, envelope: dict[str, Any]) -> H.Headers:
        """The x-reach-reply-to header for this envelope's receipts (the status fold sends the reply)."""
        reply_to = envelope.get("reply_to")
        if not reply_to:
            return []
        if len(reply_to) > 249 or self.names.family_of(reply_to) != "replies":
            self.stats.count(envelope.get("capability") or "?", "bad_reply_to")
            return []
        return [(H.REPLY_TO, reply_to.encode())]

    def _produce_receipt(self, producer: Producer, batch: _Batch, receipt: dict[str, Any],
                         reply: H.Headers | None = None) -> None:
        producer.produce(
            self.names.receipts,
            key=receipt["message_id"].encode(),
            value=encode_dict("Receipt", receipt),
            headers=[(H.MESSAGE_ID, receipt["message_id"].encode()), *(reply or ())],
            on_delivery=batch.report,
        )

    def _produce_routed(self, producer: Producer, batch: _Batch, request: RouteRequest, forward: Forward,
                        slot: _Slot, reply: H.Headers) -> None:
        """The ROUTED receipt, tagged with this worker's id so its own state loop need not decode it again."""
        if self._routed_writer is None:
            value = encode_dict("Receipt", self._routed_receipt(request, forward, slot))
        else:
            decision, instance = forward.decision, forward.instance
            value = self._routed_writer.encode(
                message_id=request.message_id, generation=request.generation, trace_id=request.trace_id,
                tenant=request.tenant, capability=request.capability, attempt=request.attempt, at=now_ms(),
                deadline=request.deadline, delivery_timeout_ms=request.delivery_timeout_ms, reroutes=request.reroutes,
                agent_id=instance.agent_id, instance_id=instance.instance_id, scores=decision.scores,
                picked_instance=decision.picked_instance, topic=forward.topic, partition=slot.partition,
                offset=slot.offset, weights=decision.weights_dict(),
            )
        key = request.message_id.encode()
        producer.produce(self.names.receipts, key=key, value=value,
                         headers=[(H.MESSAGE_ID, key), *self._routed_headers, *reply], on_delivery=batch.report)

    def _routed_receipt(self, request: RouteRequest, forward: Forward, slot: _Slot) -> dict[str, Any]:
        decision = forward.decision
        return _receipt(
            request,
            Status.ROUTED,
            now_ms(),
            agent_id=forward.instance.agent_id,
            instance_id=forward.instance.instance_id,
            decision={
                "candidates": [s.as_dict() for s in decision.scores],
                "picked_instance": decision.picked_instance,
                "topic": forward.topic,
                "partition": slot.partition,
                "offset": slot.offset,
                "weights": decision.weights_dict(),
            },
        )

    def _reject(
        self,
        msg: Message,
        value: bytes,
        envelope: dict[str, Any] | None,
        reject: Reject,
        producer: Producer,
        batch: _Batch,
        now: int,
    ) -> None:
        error = _error("INVALID_INPUT", reject.code, reject.message)
        self._dead_letter(msg, value, envelope, reject.code, error, producer, batch, now)
        if envelope is not None:
            request = RouteRequest.from_envelope(envelope)
            receipt = _receipt(request, Status.REJECTED, now, error=error)
        else:
            receipt = {
                "message_id": _fallback_id(msg),
                "trace_id": "",
                "tenant": "",
                "capability": self._capability_of(msg.topic() or ""),
                "status": Status.REJECTED.value,
                "at": now,
                "error": error,
            }
        self._produce_receipt(producer, batch, receipt, self._reply_header(envelope) if envelope else None)
        self.stats.count(receipt["capability"], "rejected")

    def _dead_letter(
        self,
        msg: Message,
        value: bytes,
        envelope: dict[str, Any] | None,
        reason: str,
        error: dict[str, str],
        producer: Producer,
        batch: _Batch,
        now: int,
    ) -> None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        message_id = envelope.get("message_id") if envelope else None
        record = {
            "envelope": value,
            "reason": reason,
            "error": error,
            "attempts": (envelope or {}).get("attempt", 0),
            "generation": (envelope or {}).get("generation", 0),
            "message_id": message_id,
            "capability": (envelope or {}).get("capability") or self._capability_of(topic),
            "first_failure_at": now,
            "last_failure_at": now,
            "origin_topic": topic,
            "origin_partition": partition,
            "origin_offset": offset,
        }
        producer.produce(
            self.names.dlq,
            key=(message_id or _fallback_id(msg)).encode(),
            value=encode_dict("DeadLetter", record),
            headers=dlq.provenance(topic, partition, offset, reason, message_id),
            on_delivery=batch.report,
        )

    def _capability_of(self, topic: str) -> str:
        prefix = self.names.capability_prefix
        return topic[len(prefix):] if topic.startswith(prefix) else topic


def _fallback_id(msg: Message) -> str:
    """A message id for an undecodable record: its x-reach-message-id header, its key, else its position."""
    raw = msg.headers() or []
    pairs: Any = raw.items() if isinstance(raw, dict) else raw
    for name, value in pairs:
        if name == H.MESSAGE_ID and value:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    key = msg.key()
    if key:
        return key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    return f"{msg.topic()}/{msg.partition()}/{msg.offset()}"


def _error(kind: str, code: str, message: str) -> dict[str, str]:
    return {"kind": kind, "code": code, "message": message}


def _weights(weights: Any) -> dict[str, float]:
    return {"fit": weights.fit, "locality": weights.locality, "load": weights.load, "affinity": weights.affinity}


def _receipt(request: RouteRequest, status: Status, at: int, **fields: Any) -> dict[str, Any]:
    return {
        "message_id": request.message_id,
        "generation": request.generation,
        "trace_id": request.trace_id,
        "tenant": request.tenant,
        "capability": request.capability,
        "status": status.value,
        "attempt": request.attempt,
        "at": at,
        "deadline": request.deadline,
        "delivery_timeout_ms": request.delivery_timeout_ms,
        "reroutes": request.reroutes,
        **fields,
    }
