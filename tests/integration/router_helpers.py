"""Helpers for the router's integration tests: simulated instances, senders, receipt collectors."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from reach.channels.closure import ChannelCallbacks
from reach.envelopes import new_envelope, now_ms, routing_key
from reach.intent.unroutable import IntentHandoff
from reach.kafka import clients, codec, topics
from reach.names import Names
from reach.records import (
    AgentRegistration,
    AgentState,
    Capability,
    DeadLetter,
    Envelope,
    Receipt,
    Status,
)
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router.route_loop import Router
from reach.streams.status.fold import StatusFold
from tests.integration.agent_support import wait_for  # noqa: F401 - re-exported for the router tests

TOPICS_FILE = Path(__file__).resolve().parents[2] / "topics.yaml"


SIMULATED_INBOX_PARTITIONS = 8
"""The inboxes of simulated instances: enough for the tests' instances to claim partitions of their own (an SDK
instance's inbox is sized by its agent: topics.yaml `families.agent`)."""


def ensure(names: Names, topic: str) -> None:
    family = names.family_of(topic)
    assert family is not None
    spec = topics.load(TOPICS_FILE).family(family)  # type: ignore[arg-type]
    if family == "agent":
        spec = spec.model_copy(update={"partitions": SIMULATED_INBOX_PARTITIONS})
    topics.ensure_topic(clients.admin(KafkaSettings()), topic, spec)


@dataclass
class Instance:
    """A simulated agent instance: publishes heartbeats, owns inbox partitions."""

    names: Names
    instance_id: str
    agent_id: str = "agent://echo/main"
    capability: str = "text.echo"
    version: str = "1.2.0"
    region: str | None = None
    inflight: int = 0
    max_concurrency: int = 1000
    partitions: list[int] = field(default_factory=lambda: [0])
    tags: list[str] = field(default_factory=list)
    state: AgentState = AgentState.READY
    extra_capabilities: list[Capability] = field(default_factory=list)
    cost: float | None = None
    priority_class: int = 0

    @property
    def inbox(self) -> str:
        return self.names.inbox(self.agent_id)

    def registration(self) -> AgentRegistration:
        caps = [Capability(name=self.capability, version=self.version, tags=self.tags), *self.extra_capabilities]
        return AgentRegistration(
            agent_id=self.agent_id,
            instance_id=self.instance_id,
            build_version="test",
            capabilities=caps,
            region=self.region,
            max_concurrency=self.max_concurrency,
            state=self.state,
            heartbeat_at=now_ms(),
            ttl_ms=60_000,
            inflight=self.inflight,
            assigned_partitions=self.partitions,
            inbox_topic=self.inbox,
            cost=self.cost,
            priority_class=self.priority_class,
        )

    def heartbeat(self, **changes: Any) -> AgentRegistration:
        for key, value in changes.items():
            setattr(self, key, value)
        ensure(self.names, self.inbox)
        reg = self.registration()
        produce(self.names.registry, reg.instance_id, codec.encode(reg))
        return reg


def produce(topic: str, key: str | None, value: bytes | None, headers: list[tuple[str, bytes]] | None = None) -> None:
    p = Producer(KafkaSettings().producer())
    p.produce(topic, key=key.encode() if key else None, value=value, headers=headers)
    assert p.flush(15) == 0


class Sender:
    """Publishes envelopes to capability topics (creating them from the cap family)."""

    def __init__(self, names: Names) -> None:
        self.names = names
        self.producer = Producer(KafkaSettings().producer())
        self._known: set[str] = set()

    def send(self, envelope: Envelope) -> str:
        self.raw(self.names.capability(envelope.capability), routing_key(envelope), codec.encode(envelope))
        return envelope.message_id

    def ensure(self, capability: str = "text.echo") -> Sender:
        """Create the capability topic now (before a router starts, so its first subscription holds it)."""
        topic = self.names.capability(capability)
        if topic not in self._known:
            ensure(self.names, topic)
            self._known.add(topic)
        return self

    def raw(self, topic: str, key: str | None, value: bytes) -> None:
        if topic not in self._known:
            ensure(self.names, topic)
            self._known.add(topic)
        self.producer.produce(topic, key=key.encode() if key else None, value=value)
        self.producer.poll(0)

    def many(self, n: int, capability: str = "text.echo", **kw: Any) -> list[str]:
        ids = [self.send(new_envelope(capability, {"i": i}, **kw)) for i in range(n)]
        self.flush()
        return ids

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


class Tail:
    """Reads a topic from the beginning, accumulating decoded records."""

    def __init__(self, topic: str, decoder: Callable[[bytes], Any] | None = None) -> None:
        self.topic = topic
        self.consumer = Consumer(KafkaSettings().consumer(f"tail-{uuid.uuid4().hex[:8]}"))
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        self.decoder = decoder
        self.records: list[Any] = []
        self.raw: list[Any] = []

    def poll(self) -> list[Any]:
        for msg in self.consumer.consume(1000, timeout=0.2):
            if msg.error():
                continue
            self.raw.append(msg)
            value = msg.value()
            self.records.append(self.decoder(value) if self.decoder and value is not None else value)
        return self.records

    def until(self, condition: Callable[[list[Any]], Any], timeout: float = 30.0, what: str = "records") -> Any:
        return wait_for(lambda: condition(self.poll()), timeout, what)

    def close(self) -> None:
        self.consumer.close()


def receipts_tail(names: Names) -> Tail:
    return Tail(names.receipts, lambda b: codec.decode(b, Receipt))


def dlq_tail(names: Names) -> Tail:
    return Tail(names.dlq, lambda b: codec.decode(b, DeadLetter))


def by_status(receipts: list[Receipt], status: Status) -> dict[str, Receipt]:
    return {r.message_id: r for r in receipts if r.status is status}


def first_per_message(receipts: list[Receipt], ids: list[str], statuses: set[Status]) -> dict[str, Receipt]:
    wanted = set(ids)
    out: dict[str, Receipt] = {}
    for r in receipts:
        if r.message_id in wanted and r.status in statuses and r.message_id not in out:
            out[r.message_id] = r
    return out


def routed_receipts(names: Names, ids: list[str], router: Router | None = None,
                    timeout: float = 60.0) -> dict[str, Receipt]:
    """The first ROUTED receipt of each of `ids`; a timeout says what did arrive and what the router holds."""
    tail = receipts_tail(names)
    try:
        # 60 s: a capability topic created after the router started is routed once the router's topic listing
        # sees it and the group rebalances; one clean-clone CI run needed more than 30 s for that
        got = tail.until(lambda rs: len(first_per_message(rs, ids, {Status.ROUTED})) == len(ids) and rs,
                         timeout, what=f"{len(ids)} ROUTED receipts")
        return first_per_message(got, ids, {Status.ROUTED})
    except AssertionError as exc:
        wanted = set(ids)
        seen: dict[str, int] = {}
        for r in tail.records:
            if r.message_id in wanted:
                seen[str(r.status)] = seen.get(str(r.status), 0) + 1
        held = router.topics.describe() if router is not None and router.topics is not None else "no router"
        raise AssertionError(f"{exc}; receipts of those messages by status: {seen or 'none'}; router: {held}; "
                             f"router error: {router.error if router is not None else None!r}") from None
    finally:
        tail.close()


@contextmanager
def running_status(state_dir: Path) -> Iterator[StatusFold]:
    """The status fold in-process (it sends the replies `invoke` waits for), with its own store directory."""
    from reach.metrics import Metrics
    from reach.streams.status.fold import StatusFold

    settings = ReachSettings()
    fold = StatusFold(names=Names(settings.namespace), kafka=KafkaSettings(), metrics=Metrics(),
                      state_dir=state_dir, url="http://127.0.0.1:0", retention_ms=settings.status_retention * 1000,
                      callbacks=ChannelCallbacks())
    fold.start()
    try:
        yield fold
    finally:
        fold.stop()


@contextmanager
def running_router(**kw: Any) -> Iterator[Router]:
    router = Router(kafka=KafkaSettings(), reach=ReachSettings(), metadata_refresh_ms=1000,
                    **{"redis": RedisSettings(), "handoff": IntentHandoff(), **kw})
    router.start(ready_timeout=30)
    try:
        yield router
    finally:
        router.stop()


def sees(router: Router, instance: Instance, **expect: Any) -> bool:
    """True once the router's registry holds the instance's latest heartbeat with these fields."""
    reg = router.state.registration(instance.instance_id)
    return reg is not None and all(getattr(reg, k) == v for k, v in expect.items())


class Worker:
    """Plays an agent instance's consumer: reads its inbox partitions and answers every envelope
    with STARTED + COMPLETED receipts (result = {"echo": payload}), like the agent SDK would."""

    def __init__(self, instance: Instance) -> None:
        import threading

        self.instance = instance
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer(KafkaSettings().consumer(f"worker-{uuid.uuid4().hex[:8]}"))
        self._consumer.assign([TopicPartition(instance.inbox, p, OFFSET_BEGINNING) for p in instance.partitions])
        self._producer = Producer(KafkaSettings().producer(**{"linger.ms": 1}))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from reach.receipts import receipt_for
        from reach.records import StepStatus

        while not self._stop.is_set():
            msgs = self._consumer.consume(500, timeout=0.1)
            for msg in msgs:
                if msg.error() or msg.value() is None:
                    continue
                env = codec.decode(msg.value(), Envelope)  # type: ignore[arg-type]
                self.seen.append(env.message_id)
                inst = self.instance
                for status in (Status.STARTED, Status.COMPLETED):
                    extra: dict[str, Any] = {}
                    if status is Status.COMPLETED:
                        extra = {"result": b'{"echo": ' + env.payload + b"}", "step_status": StepStatus.OK}
                    r = receipt_for(env, status, agent_id=inst.agent_id, instance_id=inst.instance_id, **extra)
                    self._producer.produce(self.instance.names.receipts, key=env.message_id.encode(),
                                           value=codec.encode(r))
            if msgs:
                self._producer.flush(10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()
