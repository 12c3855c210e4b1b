"""The in-memory consumer (reach.kafka.memory): group membership, rebalances inside poll, positions, commits."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from reach.kafka.memory.bus import TP, Bus, ClusterMetadata

Callback = Callable[..., Any]


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
        self._pending: set[TP] | None = None  # partitions to assign once their previous owners let go of them
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
        if epoch != self._epoch:
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
            self._pending = added
        if self._pending is None:
            return
        if self._pending & self._bus.owned_by_others(self.group, self._member):
            return  # as the broker's join barrier: not before their previous owner revoked them (in its own poll)
        added, self._pending = self._pending, None
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
