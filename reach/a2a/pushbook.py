"""Where A2A push configs live: the compacted `<ns>.push` topic (reach.a2a.push), followed from the beginning by
every gateway replica (decisions/0042).

`KafkaPushBook.put` writes a task's whole set and waits for the broker's ack before it answers, then applies it
here, so the replica that answered sees it at once; the others see it when their follower fetches it (within a
poll). `sync` waits until the follower has read what the topic held when it was called: the sender calls it
before a batch of status changes, so a config acknowledged before a change was folded is known when that change
is sent. `MemoryPushBook` is its twin for tests.

Bounds (docs/a2a.md#push-notifications): the sender `expire`s the configs of a task it saw end more than a while ago
(a tombstone on the topic, so every replica and the next start forget them too), and `sweep` forgets locally the
configs whose newest was set longer ago than the topic keeps records (its retention deletes them there; without
this, a replica that never saw the task end would hold them until it restarts).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from reach.a2a.push import TaskPush
from reach.errors import InfraUnavailable
from reach.kafka import clients, topicreader
from reach.kafka.types import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from reach.names import Names
from reach.settings import KafkaSettings

log = logging.getLogger("reach.a2a.push")
POLL_S = 0.2
MAX_AGE_MS = 7 * 24 * 3600 * 1000  # the push topic's retention (topics.yaml): older configs are gone from it too


class MemoryPushBook:
    """The push configs in a dict (tests, and a gateway without the push topic: none)."""

    def __init__(self, *, allow_private: bool = False) -> None:
        self.allow_private = allow_private
        self.tasks: dict[str, TaskPush] = {}
        self.offered: list[dict[str, Any]] = []
        self.expired: list[str] = []
        self._changed: Callable[[str], None] | None = None
        self._offers: Callable[[dict[str, Any]], None] | None = None
        self.counts: Callable[[], dict[str, int]] | None = None  # the sender's counters (reach.a2a.pushsender)

    def get(self, task_id: str) -> TaskPush | None:
        return self.tasks.get(task_id)

    async def put(self, task: TaskPush) -> None:
        self._apply(task)

    def _apply(self, task: TaskPush) -> None:
        if task.configs:
            self.tasks[task.task_id] = task
            if self._changed is not None:  # a config the sender may owe changes it has already read (the race of
                self._changed(task.task_id)  # a config set while its change was being folded: decisions/0047)
        else:
            self.tasks.pop(task.task_id, None)

    def on_change(self, changed: Callable[[str], None]) -> None:
        """Called with a task id each time a set of configs is applied (put here, or read from the topic)."""
        self._changed = changed

    def listen(self, offers: Callable[[dict[str, Any]], None]) -> None:
        """Where `offer` hands rows (the sender)."""
        self._offers = offers

    def offer(self, row: dict[str, Any]) -> None:
        self.offered.append(row)
        if self._offers is not None:
            self._offers(row)

    def sync(self, timeout: float = 10.0) -> None:
        """Nothing to catch up with in memory."""

    def expire(self, task_id: str) -> None:
        """Forget the task's configs (its task ended a while ago)."""
        self.expired.append(task_id)
        self.tasks.pop(task_id, None)

    def sweep(self, now_ms: int, max_age_ms: int = MAX_AGE_MS) -> int:
        """Forget the tasks whose newest config is older than `max_age_ms` (here only); how many were forgotten."""
        old = [t.task_id for t in list(self.tasks.values())
               if max((c.created_at for c in t.configs), default=0) < now_ms - max_age_ms]
        for task_id in old:
            self.tasks.pop(task_id, None)
        return len(old)


class KafkaPushBook(MemoryPushBook):
    """The configs as `<ns>.push` says now; `offer` hands a task's row to the sender (a config set on a running
    task catches up with its current row)."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, allow_private: bool = False,
                 open_consumer: Callable[[], Consumer] | None = None) -> None:
        super().__init__(allow_private=allow_private)
        self.topic = names.push
        self._open = open_consumer or (lambda: topicreader.open_reader("gateway-push", kafka, profile="idle"))
        self._producer: Producer = clients.producer(kafka, profile="hot")
        self._lock = threading.Lock()
        self._caught_up = threading.Condition(self._lock)
        self._positions: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._probe: Consumer | None = None  # asks for end offsets: the follower's consumer is busy polling
        self._probe_lock = threading.Lock()

    def offer(self, row: dict[str, Any]) -> None:
        if self._offers is not None:
            self._offers(row)

    def get(self, task_id: str) -> TaskPush | None:
        with self._lock:
            return self.tasks.get(task_id)

    def expire(self, task_id: str) -> None:
        """A tombstone for the task's configs (not waited for: if it is lost, `sweep` bounds them), forgotten here."""
        try:
            self._producer.produce(self.topic, key=task_id.encode(), value=None)
            self._producer.poll(0)
        except (BufferError, KafkaException) as exc:
            log.warning("push configs of %s not expired on %s: %s", task_id[:100], self.topic, exc)
        with self._lock:
            self.tasks.pop(task_id, None)

    def sweep(self, now_ms: int, max_age_ms: int = MAX_AGE_MS) -> int:
        with self._lock:
            return super().sweep(now_ms, max_age_ms)

    def start(self, timeout: float = 30.0) -> None:
        """Assign every partition from the beginning and follow; return once read to the end."""
        consumer = self._open()
        try:
            parts = topicreader.partitions(consumer, self.topic, timeout)
        except Exception:
            consumer.close()
            raise
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        self._consumer = consumer
        self._probe = self._open()
        self._positions = dict.fromkeys(parts, 0)
        self._thread = threading.Thread(target=self._follow, name="reach-a2a-push", daemon=True)
        self._thread.start()
        self.sync(timeout)

    def sync(self, timeout: float = 10.0) -> None:
        """Return once the follower has read every record the topic held when called; InfraUnavailable if not in
        `timeout`."""
        probe = self._probe
        if probe is None:
            return
        with self._probe_lock:
            ends = {p: topicreader.watermarks(probe, self.topic, p, timeout)[1] for p in list(self._positions)}
        with self._caught_up:
            if not self._caught_up.wait_for(lambda: all(self._positions.get(p, 0) >= end for p, end in ends.items()),
                                            timeout):
                raise InfraUnavailable(f"the push configs ({self.topic}) were not read to their end in "
                                       f"{timeout:.0f} s; is the broker up?")

    async def put(self, task: TaskPush) -> None:
        """Write the task's set (a tombstone when empty) and wait for the broker's ack; then apply it here."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()

        def report(err: KafkaError | None, _msg: object) -> None:
            if not done.done():
                loop.call_soon_threadsafe(_settle, done, err)

        self._producer.produce(self.topic, key=task.task_id.encode(), value=task.encode(), on_delivery=report)
        await loop.run_in_executor(None, self._producer.flush, 10)
        if not done.done():
            raise InfraUnavailable(f"the push config of {task.task_id[:100]} was not acknowledged in 10 s")
        await done
        with self._lock:
            self._apply(task)

    def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        try:
            while not self._stop.is_set():
                messages = clients.take(consumer, 500, POLL_S)
                with self._caught_up:
                    for msg in messages:
                        if msg.error():
                            continue
                        self._read(msg.key(), msg.value(), f"{self.topic}@{msg.offset()}")
                        self._positions[msg.partition() or 0] = (msg.offset() or 0) + 1
                    for tp in consumer.position([TopicPartition(self.topic, p) for p in self._positions]):
                        if tp.offset >= 0:
                            self._positions[tp.partition] = max(self._positions[tp.partition], tp.offset)
                    self._caught_up.notify_all()
        except Exception:  # noqa: BLE001 - logged: the configs stop changing here until the gateway restarts
            log.exception("the push configs stopped following %s", self.topic)
        finally:
            consumer.close()
            self._consumer = None

    def _read(self, key: bytes | None, value: bytes | None, where: str) -> None:
        task_id = (key or b"").decode(errors="replace")
        if value is None:
            self.tasks.pop(task_id, None)
            return
        try:
            self._apply(TaskPush.decode(value))
        except (ValueError, KeyError, TypeError) as exc:  # one bad record must not stop the follower
            log.warning("push config at %s skipped: %s", where, exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._producer.flush(5)
        if self._probe is not None:
            with self._probe_lock:
                self._probe.close()
                self._probe = None


def _settle(future: asyncio.Future[None], err: KafkaError | None) -> None:
    if future.done():
        return
    if err is None:
        future.set_result(None)
    else:
        future.set_exception(InfraUnavailable(f"the push config was refused by the broker: {err}"))
