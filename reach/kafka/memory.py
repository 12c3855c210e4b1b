"""An in-process Kafka behind confluent-kafka's client API: topics, partitions, offsets, consumer groups.

`reach.kafka.clients` builds these clients instead of librdkafka's when `bootstrap.servers` is
`memory://<name>` (REACH_BOOTSTRAP): every Consumer, Producer and AdminClient of one name shares one `Bus`,
so the real router, agent runner, status fold, delay tiers and timekeeper run in one process with no broker
(tests/unit/e2e, docs/architecture.md "Running the request path in memory"). It implements the subset of the
API Reach calls, with the semantics Reach relies on:

- producers partition keyed records with murmur2 (Java's, as `partitioner=murmur2_random` does), so a
  message_id's receipts land where `reach.streams.status.lookup.partition_of` looks; a record is readable as
  soon as it is produced, and its delivery report is served by the producer's poll() or flush();
- consumers in one group share the partitions of the topics they subscribe to (names or `^regex`), round
  robin; a member joining or leaving, or a new topic, rebalances the group inside each member's next
  poll/consume, with `on_revoke`/`on_assign` called there (eager, or incremental for cooperative-sticky);
- commits are per group; an asynchronous commit is answered through the consumer's `on_commit` inside poll.

Not modelled: replication, retention and compaction (a compacted topic keeps every record; readers take the
latest per key anyway), transactions, session timeouts (a member leaves by close() or unsubscribe()).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

SCHEME = "memory://"

TP = tuple[str, int]
Headers = list[tuple[str, str | bytes | None]]
Callback = Callable[..., Any]


def bus_name(conf: dict[str, Any]) -> str | None:
    """The bus a client config asks for (`bootstrap.servers` = memory://<name>), None for a real broker."""
    servers = str(conf.get("bootstrap.servers") or "")
    return servers[len(SCHEME):] or "default" if servers.startswith(SCHEME) else None


_BUSES: dict[str, Bus] = {}
_BUSES_LOCK = threading.Lock()


def bus(name: str) -> Bus:
    """The bus of that name, created empty on first use (one per process and name)."""
    with _BUSES_LOCK:
        if name not in _BUSES:
            _BUSES[name] = Bus(name)
        return _BUSES[name]


def forget(name: str) -> None:
    """Drop a bus: the next client of that name starts on an empty one."""
    with _BUSES_LOCK:
        _BUSES.pop(name, None)


def _unknown(topic: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"unknown topic {topic}"))


def _bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def _headers(raw: Any) -> Headers | None:
    if not raw:
        return None
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(str(k), _bytes(v)) for k, v in pairs]


@dataclass(frozen=True, slots=True)
class _Record:
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp: int


@dataclass
class _Topic:
    name: str
    partitions: list[list[_Record]]
    configs: dict[str, str] = field(default_factory=dict)


# -- metadata, shaped like confluent-kafka's ---------------------------------------------------------------

@dataclass(frozen=True)
class PartitionMetadata:
    id: int
    leader: int = 1
    replicas: tuple[int, ...] = (1,)
    isrs: tuple[int, ...] = (1,)
    error: KafkaError | None = None


@dataclass(frozen=True)
class TopicMetadata:
    topic: str
    partitions: dict[int, PartitionMetadata]
    error: KafkaError | None = None


@dataclass(frozen=True)
class BrokerMetadata:
    id: int
    host: str
    port: int = 0


@dataclass(frozen=True)
class ClusterMetadata:
    topics: dict[str, TopicMetadata]
    brokers: dict[int, BrokerMetadata]
    cluster_id: str = "memory"
    controller_id: int = 1


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None


@dataclass(frozen=True)
class Assignment:
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    assignment: Assignment


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    members: list[GroupMember]


@dataclass(frozen=True)
class GroupOffsets:
    group_id: str
    topic_partitions: list[TopicPartition]


def _done(result: Any = None, error: BaseException | None = None) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
    return future


# -- the bus -----------------------------------------------------------------------------------------------

class _Group:
    """Members (in join order) and committed offsets of one consumer group."""

    def __init__(self) -> None:
        self.members: dict[int, MemoryConsumer] = {}
        self.committed: dict[TP, int] = {}
        self.generation = 0


class Bus:
    """Topics and groups of one in-memory cluster; every method is thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cond = threading.Condition(threading.RLock())
        self.topics: dict[str, _Topic] = {}
        self.groups: dict[str, _Group] = {}
        self.topology = 0  # bumped when topics or partitions appear: regex subscriptions and groups rebalance
        self._ids = itertools.count(1)

    # topics

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> bool:
        """False when it exists already."""
        with self.cond:
            if name in self.topics:
                return False
            self.topics[name] = _Topic(name, [[] for _ in range(max(partitions, 1))], dict(configs or {}))
            self.topology += 1
            self.cond.notify_all()
            return True

    def add_partitions(self, name: str, total: int) -> None:
        with self.cond:
            topic = self._topic(name)
            topic.partitions.extend([] for _ in range(total - len(topic.partitions)))
            self.topology += 1
            self.cond.notify_all()

    def delete_topic(self, name: str) -> None:
        with self.cond:
            self._topic(name)
            del self.topics[name]
            self.topology += 1
            self.cond.notify_all()

    def _topic(self, name: str) -> _Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise _unknown(name)
        return topic

    def metadata(self, topic: str | None = None) -> ClusterMetadata:
        with self.cond:
            names = [topic] if topic is not None else list(self.topics)
            found: dict[str, TopicMetadata] = {}
            for name in names:
                t = self.topics.get(name)
                found[name] = (TopicMetadata(name, {p: PartitionMetadata(p) for p in range(len(t.partitions))})
                               if t is not None else
                               TopicMetadata(name, {}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            return ClusterMetadata(found, {1: BrokerMetadata(1, self.name)})

    def append(self, topic: str, partition: int, record: _Record) -> int:
        with self.cond:
            log = self._topic(topic).partitions[partition]
            log.append(record)
            self.cond.notify_all()
            return len(log) - 1

    def read(self, tp: TP, offset: int) -> Message | None:
        with self.cond:
            topic = self.topics.get(tp[0])
            if topic is None or tp[1] >= len(topic.partitions) or offset >= len(topic.partitions[tp[1]]):
                return None
            rec = topic.partitions[tp[1]][offset]
        return Message(topic=tp[0], partition=tp[1], offset=offset, key=rec.key, value=rec.value,
                       headers=list(rec.headers) if rec.headers else None,
                       timestamp=(TIMESTAMP_CREATE_TIME, rec.timestamp))

    def watermarks(self, tp: TP) -> tuple[int, int]:
        with self.cond:
            topic = self._topic(tp[0])
            if tp[1] >= len(topic.partitions):
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
            return 0, len(topic.partitions[tp[1]])

    def partitions(self, topic: str) -> int:
        with self.cond:
            found = self.topics.get(topic)
            return len(found.partitions) if found is not None else 0

    def offset_for_time(self, tp: TP, at_ms: int) -> int:
        with self.cond:
            log = self._topic(tp[0]).partitions[tp[1]]
            return next((i for i, rec in enumerate(log) if rec.timestamp >= at_ms), OFFSET_END)

    # groups

    def join(self, group: str, member: MemoryConsumer) -> int:
        with self.cond:
            member_id = next(self._ids)
            g = self.groups.setdefault(group, _Group())
            g.members[member_id] = member
            g.generation += 1
            return member_id

    def leave(self, group: str, member_id: int) -> None:
        with self.cond:
            g = self.groups.get(group)
            if g is not None and g.members.pop(member_id, None) is not None:
                g.generation += 1

    def epoch(self, group: str) -> tuple[int, int]:
        with self.cond:
            return self.groups[group].generation, self.topology

    def target(self, group: str, member_id: int) -> set[TP]:
        """The partitions the group's round-robin assignment gives this member now."""
        with self.cond:
            members = sorted(self.groups[group].members.items())
            wanted = {mid: set(m.matching()) for mid, m in members}
            every = sorted({(t, p) for topics in wanted.values() for t in topics for p in range(self.partitions(t))})
            mine: set[TP] = set()
            turn = 0
            for tp in every:
                takers = [mid for mid, topics in wanted.items() if tp[0] in topics]
                chosen = takers[turn % len(takers)]
                turn += 1
                if chosen == member_id:
                    mine.add(tp)
            return mine

    def commit(self, group: str, offsets: dict[TP, int]) -> None:
        with self.cond:
            self.groups.setdefault(group, _Group()).committed.update(offsets)

    def committed(self, group: str, tp: TP) -> int:
        with self.cond:
            g = self.groups.get(group)
            return g.committed.get(tp, OFFSET_INVALID) if g is not None else OFFSET_INVALID

    def describe(self, group: str) -> GroupDescription:
        with self.cond:
            g = self.groups.get(group)
            if g is None or not g.members:
                return GroupDescription(group, "EMPTY", [])
            return GroupDescription(group, "STABLE", [
                GroupMember(str(mid), m.client_id, Assignment([TopicPartition(t, p) for t, p in sorted(m.owned())]))
                for mid, m in sorted(g.members.items())])

    def group_offsets(self, group: str) -> GroupOffsets:
        with self.cond:
            g = self.groups.get(group)
            offsets = sorted((g.committed if g is not None else {}).items())
            return GroupOffsets(group, [TopicPartition(t, p, o) for (t, p), o in offsets])

    def wait(self, timeout: float) -> None:
        with self.cond:
            self.cond.wait(timeout)


# -- clients -----------------------------------------------------------------------------------------------

class MemoryProducer:
    """produce / poll / flush / list_topics of confluent_kafka.Producer; reports are served by poll and flush."""

    def __init__(self, bus: Bus, conf: dict[str, Any]) -> None:
        self._bus = bus
        self._max_bytes = int(conf.get("message.max.bytes", 1_000_000))
        self._reports: deque[tuple[Callback, KafkaError | None, Message]] = deque()
        self._lock = threading.Lock()
        self._rng = random.Random()
        from aiokafka.partitioner import murmur2  # Java's murmur2, as librdkafka's murmur2_random; imported on use

        self._murmur2 = murmur2

    def produce(self, topic: str, value: str | bytes | None = None, key: str | bytes | None = None,
                partition: int = -1, on_delivery: Callback | None = None, timestamp: int = 0,
                headers: Any = None, callback: Callback | None = None) -> None:
        key_b, value_b, hdrs = _bytes(key), _bytes(value), _headers(headers)
        count = self._bus.partitions(topic)
        error: KafkaError | None = None
        offset = -1
        if count == 0:
            error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"unknown topic {topic}")
        elif partition >= count:
            error = KafkaError(KafkaError._UNKNOWN_PARTITION, f"{topic} has {count} partitions")
        elif len(value_b or b"") + len(key_b or b"") > self._max_bytes:
            error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        else:
            if partition < 0:
                partition = ((self._murmur2(key_b) & 0x7FFFFFFF) % count if key_b is not None
                             else self._rng.randrange(count))
            offset = self._bus.append(topic, partition, _Record(key_b, value_b, hdrs,
                                                                timestamp or int(time.time() * 1000)))
        report = on_delivery or callback
        if report is not None:
            msg = Message(topic=topic, partition=max(partition, 0), offset=offset, key=key_b, value=value_b,
                          headers=hdrs, error=error)
            with self._lock:
                self._reports.append((report, error, msg))

    def poll(self, timeout: float | None = None) -> int:
        served = 0
        while True:
            with self._lock:
                if not self._reports:
                    return served
                report, error, msg = self._reports.popleft()
            report(error, msg)
            served += 1

    def flush(self, timeout: float | None = None) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        return len(self._reports)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._bus.metadata(topic)


class MemoryConsumer:
    """The consumer calls of confluent_kafka.Consumer Reach makes, with group membership on the bus."""

    def __init__(self, bus: Bus, conf: dict[str, Any]) -> None:
        self._bus = bus
        self.group = str(conf["group.id"])
        self.client_id = str(conf.get("client.id", "memory"))
        self._reset = str(conf.get("auto.offset.reset", "latest"))
        self._on_commit: Callback | None = conf.get("on_commit")
        self._cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky"
        self._lock = threading.RLock()
        self._next: dict[TP, int] = {}  # the next offset to read, per assigned partition
        self._read: set[TP] = set()  # partitions with a known position (read from, or sought)
        self._paused: set[TP] = set()
        self._answers: deque[tuple[KafkaError | None, list[TopicPartition]]] = deque()
        self._subscription: list[str] = []
        self._callbacks: dict[str, Callback | None] = {}
        self._member: int | None = None
        self._epoch: tuple[int, int] | None = None
        self._turn = 0
        self._touched = False
        self._settled = False  # the first rebalance always calls on_assign, even with nothing to assign
        self._closed = False

    # -- group membership

    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None,
                  on_lost: Callback | None = None) -> None:
        self._check()
        self._subscription = list(topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        if self._member is None:
            self._member = self._bus.join(self.group, self)
        else:
            with self._bus.cond:
                self._bus.groups[self.group].generation += 1

    def unsubscribe(self) -> None:
        self._leave()
        with self._lock:
            self._next.clear()
            self._read.clear()

    def matching(self) -> list[str]:
        """The bus's topics this member's subscription names (a `^` entry is a regex)."""
        found = []
        for entry in self._subscription:
            if entry.startswith("^"):
                pattern = re.compile(entry)
                found += [t for t in list(self._bus.topics) if pattern.match(t)]
            elif entry in self._bus.topics:
                found.append(entry)
        return found

    def owned(self) -> set[TP]:
        with self._lock:
            return set(self._next)

    def _leave(self) -> None:
        if self._member is not None:
            self._bus.leave(self.group, self._member)
            self._member, self._epoch = None, None

    def _rebalance(self) -> None:
        """A changed group or topology: revoke and assign inside poll, on the consumer's thread."""
        if self._member is None:
            return
        epoch = self._bus.epoch(self.group)
        if epoch == self._epoch:
            return
        self._epoch = epoch
        target = self._bus.target(self.group, self._member)
        current = self.owned()
        revoked = current - target if self._cooperative else current
        added = target - current if self._cooperative else target
        if not self._cooperative and current == target and self._settled:
            return
        self._settled = True
        if revoked:
            self._call("revoke", revoked, lambda tps: self._drop(tps))
        self._call("assign", added, lambda tps: self._add(tps))

    def _call(self, which: str, partitions: set[TP], default: Callable[[list[TopicPartition]], None]) -> None:
        tps = [TopicPartition(t, p) for t, p in sorted(partitions)]
        callback = self._callbacks.get(which)
        self._touched = False
        if callback is not None:
            callback(self, tps)
        if not self._touched:  # as librdkafka: a callback that does not (un)assign itself leaves it to the client
            default(tps)

    # -- assignment

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        with self._lock:
            self._next.clear()
            self._read.clear()
            self._paused.clear()
        self._add(partitions)

    def unassign(self) -> None:
        with self._lock:
            self._touched = True
            self._next.clear()
            self._read.clear()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._add(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._drop(partitions)

    def assignment(self) -> list[TopicPartition]:
        self._check()
        return [TopicPartition(t, p) for t, p in sorted(self.owned())]

    def _add(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._touched = True
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._next[key] = self._start(key, tp.offset)
                if tp.offset >= 0:
                    self._read.add(key)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._touched = True
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._next.pop(key, None)
                self._read.discard(key)
                self._paused.discard(key)

    def _start(self, tp: TP, offset: int) -> int:
        """Where reading begins: the given offset, else the group's commit, else auto.offset.reset."""
        low, high = self._bus.watermarks(tp)
        if offset == OFFSET_BEGINNING:
            return low
        if offset == OFFSET_END:
            return high
        if offset >= 0:
            return offset
        committed = self._bus.committed(self.group, tp)
        if committed >= 0:
            return committed
        return low if self._reset in ("earliest", "smallest", "beginning") else high

    # -- reading

    def poll(self, timeout: float | None = None) -> Message | None:
        found = self.consume(1, timeout)
        return found[0] if found else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        self._check()
        deadline = time.monotonic() + (timeout if timeout is not None and timeout >= 0 else 3600.0)
        while True:
            self._serve()
            found = self._take(num_messages)
            left = deadline - time.monotonic()
            if found or left <= 0:
                return found
            self._bus.wait(min(left, 0.05))

    def _serve(self) -> None:
        self._rebalance()
        while self._answers:
            err, tps = self._answers.popleft()
            if self._on_commit is not None:
                self._on_commit(err, tps)

    def _take(self, limit: int) -> list[Message]:
        out: list[Message] = []
        with self._lock:
            ready = [tp for tp in sorted(self._next) if tp not in self._paused]
            if not ready:
                return out
            self._turn = (self._turn + 1) % len(ready)
            for tp in ready[self._turn:] + ready[:self._turn]:  # every partition gets its turn first
                while len(out) < limit:
                    msg = self._bus.read(tp, self._next[tp])
                    if msg is None:
                        break
                    out.append(msg)
                    self._next[tp] += 1
                    self._read.add(tp)
        return out

    def seek(self, partition: TopicPartition) -> None:
        with self._lock:
            key = (partition.topic, partition.partition)
            if key not in self._next:
                raise KafkaException(KafkaError(KafkaError._STATE, f"{key} is not assigned"))
            self._next[key] = self._start(key, partition.offset)
            self._read.add(key)

    def pause(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._paused -= {(tp.topic, tp.partition) for tp in partitions}

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        with self._lock:
            return [TopicPartition(tp.topic, tp.partition,
                                   self._next[(tp.topic, tp.partition)] if (tp.topic, tp.partition) in self._read
                                   else OFFSET_INVALID) for tp in partitions]

    # -- offsets

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        self._check()
        if message is not None:
            wanted = {(message.topic() or "", message.partition() or 0): (message.offset() or 0) + 1}
        elif offsets is not None:
            wanted = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        else:
            with self._lock:
                wanted = {tp: self._next[tp] for tp in self._read if tp in self._next}
        self._bus.commit(self.group, wanted)
        answered = [TopicPartition(t, p, o) for (t, p), o in wanted.items()]
        if asynchronous:
            self._answers.append((None, answered))
            return None
        return answered

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._bus.committed(self.group, (tp.topic, tp.partition)))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return self._bus.watermarks((partition.topic, partition.partition))

    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float | None = None) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self._bus.offset_for_time((tp.topic, tp.partition), tp.offset))
                for tp in partitions]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._bus.metadata(topic)

    def memberid(self) -> str | None:
        return str(self._member) if self._member is not None else None

    def close(self) -> None:
        if not self._closed:
            self._leave()
            self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")


class MemoryAdmin:
    """The AdminClient calls Reach makes (topics, configs, group descriptions and offsets); futures are done."""

    def __init__(self, bus: Bus, conf: dict[str, Any] | None = None) -> None:
        self._bus = bus

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        return self._bus.metadata(topic)

    def create_topics(self, new_topics: list[Any], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        out = {}
        for new in new_topics:
            created = self._bus.create_topic(new.topic, new.num_partitions, dict(new.config or {}))
            out[new.topic] = _done() if created else _done(error=KafkaException(
                KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, f"topic {new.topic} already exists")))
        return out

    def create_partitions(self, new_partitions: list[Any], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        for new in new_partitions:
            self._bus.add_partitions(new.topic, new.new_total_count)
        return {new.topic: _done() for new in new_partitions}

    def delete_topics(self, topics: list[str], **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        out = {}
        for name in topics:
            try:
                self._bus.delete_topic(name)
                out[name] = _done()
            except KafkaException as exc:
                out[name] = _done(error=exc)
        return out

    def describe_configs(self, resources: list[Any], **_kwargs: Any) -> dict[Any, concurrent.futures.Future[Any]]:
        out = {}
        with self._bus.cond:
            for res in resources:
                topic = self._bus.topics.get(res.name)
                out[res] = (_done({k: ConfigValue(k, v) for k, v in topic.configs.items()}) if topic is not None
                            else _done(error=_unknown(res.name)))
        return out

    def incremental_alter_configs(self, resources: list[Any],
                                  **_kwargs: Any) -> dict[Any, concurrent.futures.Future[Any]]:
        with self._bus.cond:
            for res in resources:
                self._bus._topic(res.name).configs.update({e.name: e.value for e in res.incremental_configs})
        return {res: _done() for res in resources}

    def describe_consumer_groups(self, group_ids: list[str],
                                 **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        return {g: _done(self._bus.describe(g)) for g in group_ids}

    def list_consumer_group_offsets(self, requests: Iterable[Any],
                                    **_kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        return {r.group_id: _done(self._bus.group_offsets(r.group_id)) for r in requests}

    def poll(self, timeout: float | None = None) -> int:
        return 0
