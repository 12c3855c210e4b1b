"""What the agent instances of one process share (decision 0073): one producer, one cancel and control feed, and
the registry read of the declaration check at start.

An instance alone in its process is what it always was. Several in one process (a worker hosting a fleet of
small agents, the swarm bench) no longer pay a producer, its acks thread, a cancels consumer and its thread
each: at rest those woke ~15 times a second per instance and held two librdkafka clients, and 1,200 instances
needed more than two cores before any traffic. What stays per instance is what delivery and health rest on:
the inbox consumer (its own group member, so the group fences it), the commits, the handlers, the heartbeat.

`publisher(kafka)` and `cancel_feed(...)` hand out handles on one shared object per configuration; the last
handle released closes it. A handle's `close`/`stop` is its own: closing one instance waits for the records
that instance sent (its tombstone), not for its neighbours' traffic. A producer whose record failed for the
broker's reasons (not the record's) is retired: instances started from then on get a fresh one, those
holding it stop on their own DeliveryFailed as before and are restarted onto the new one.

Instances a process starts while it reads the registry for another one's declaration check (reach.agent.modes)
take that read: each read is the whole topic, so a fleet rolled out in one process read it once per instance,
quadratic in the fleet.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, Generic, TypeVar

from reach.agent.cancelfeed import CancelFeed
from reach.agent.exceptions import DeliveryFailed, RecordRefused
from reach.agent.publisher import Publisher
from reach.core.views.controlview import ControlView
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable
from reach.kafka import clients
from reach.kafka.headers import Headers
from reach.kafka.types import Message
from reach.names import Names
from reach.registry import read_registry
from reach.settings import KafkaSettings

T = TypeVar("T")


class _Pool(Generic[T]):
    """One object per key, counted: `acquire` makes it on first use, `release` closes it after the last."""

    def __init__(self, make: Callable[[str], T], close: Callable[[T], Any]) -> None:
        self._make = make
        self._close = close
        self._lock = threading.Lock()
        self._held: dict[str, tuple[T, int]] = {}

    def acquire(self, key: str) -> T:
        with self._lock:
            obj, count = self._held.get(key) or (self._make(key), 0)
            self._held[key] = (obj, count + 1)
            return obj

    def release(self, key: str, obj: T) -> None:
        with self._lock:
            held, count = self._held[key]
            if count > 1:
                self._held[key] = (held, count - 1)
                return
            del self._held[key]
        self._close(obj)  # the last handle of this object


def _key(conf: dict[str, Any], *extra: str) -> str:
    return json.dumps([sorted((k, str(v)) for k, v in conf.items()), *extra])


def _reader_conf(kafka: KafkaSettings) -> dict[str, Any]:
    """The reading side's librdkafka settings, what a shared reader is keyed by; settings that name no broker yet
    (a runner built before `reach local up`, the unit tests' seams) are keyed by themselves: nothing connects
    before start, and start says what is missing."""
    try:
        return kafka.consumer("-", profile="idle")
    except InfraUnavailable:
        return {"settings": kafka.model_dump_json()}


# -- the producer ------------------------------------------------------------------------------------------

class _Producers:
    """Shared Publishers by producer configuration, with a holder count per (possibly retired) Publisher."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, Publisher] = {}
        self._holders: dict[int, int] = {}

    def acquire(self, kafka: KafkaSettings) -> tuple[str, Publisher]:
        key = _key(kafka.producer(profile="receipts"))
        with self._lock:
            pub = self._current.get(key)
            if pub is None:
                pub = self._current[key] = Publisher(clients.producer(kafka, profile="receipts"))
            self._holders[id(pub)] = self._holders.get(id(pub), 0) + 1
            return key, pub

    def release(self, key: str, pub: Publisher, timeout: float) -> None:
        with self._lock:
            left = self._holders[id(pub)] = self._holders[id(pub)] - 1
            if left:
                return
            del self._holders[id(pub)]
            if self._current.get(key) is pub:
                del self._current[key]
        pub.close(timeout)

    def retire(self, key: str, pub: Publisher) -> None:
        with self._lock:
            if self._current.get(key) is pub:
                del self._current[key]


_PRODUCERS = _Producers()


class SharedPublisher:
    """One instance's handle on its process's Publisher: `send` as Publisher.send; `flush`/`close` wait for
    this handle's own records only; `close` releases the handle (the last one closes the producer)."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._key, self._publisher = _PRODUCERS.acquire(kafka)
        self._lock = threading.Lock()
        self._pending: set[Future[Message]] = set()
        self._closed = False

    def send(self, topic: str, key: str, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None) -> Future[Message]:
        future = self._publisher.send(topic, key, value, headers=headers, partition=partition)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._settled)
        return future

    def _settled(self, future: Future[Message]) -> None:
        with self._lock:
            self._pending.discard(future)
        error = future.exception()
        if isinstance(error, DeliveryFailed) and not isinstance(error, RecordRefused):
            _PRODUCERS.retire(self._key, self._publisher)  # the broker's trouble: new instances get a new producer

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for every record this handle sent; returns how many are still unacknowledged."""
        with self._lock:
            pending = list(self._pending)
        _done, not_done = wait(pending, timeout=timeout)
        return len(not_done)

    def close(self, timeout: float = 30.0) -> int:
        left = self.flush(timeout)
        if not self._closed:
            self._closed = True
            _PRODUCERS.release(self._key, self._publisher, timeout)
        return left


def publisher(kafka: KafkaSettings) -> SharedPublisher:
    """A handle on the process's Publisher for these Kafka settings (the `receipts` profile, decision 0071)."""
    return SharedPublisher(kafka)


# -- the cancel and control feed -----------------------------------------------------------------------

_FEEDS: _Pool[CancelFeed] = _Pool(lambda key: _new_feed(key), lambda feed: feed.stop())
_FEED_ARGS: dict[str, tuple[str, str, KafkaSettings]] = {}
_FEED_START = threading.Lock()


def _new_feed(key: str) -> CancelFeed:
    topic, control, kafka = _FEED_ARGS[key]
    return CancelFeed(topic=topic, control_topic=control, kafka=kafka)


class SharedFeed:
    """One instance's handle on its process's CancelFeed: `book`, `view` and `caught_up` are the feed's;
    `start` returns once the feed has read both topics to their ends (as CancelFeed.start); `stop` releases."""

    def __init__(self, *, topic: str, control_topic: str, kafka: KafkaSettings) -> None:
        self._key = _key(_reader_conf(kafka), topic, control_topic)
        _FEED_ARGS.setdefault(self._key, (topic, control_topic, kafka))
        self._feed = _FEEDS.acquire(self._key)
        self.book = self._feed.book
        self.view: ControlView = self._feed.view
        self.caught_up = self._feed.caught_up
        self._stopped = False

    def start(self, timeout: float = 10.0) -> None:
        with _FEED_START:  # the first start waits for the catch-up; later ones find it done (or timed out)
            self._feed.start(timeout)

    def stop(self) -> None:
        if not self._stopped:  # the runner stops it through AgentControl and directly: once is the handle's
            self._stopped = True
            _FEEDS.release(self._key, self._feed)


def cancel_feed(*, topic: str, control_topic: str, kafka: KafkaSettings) -> SharedFeed:
    """A handle on the process's feed of `topic` (cancels) and `control_topic` for these Kafka settings."""
    return SharedFeed(topic=topic, control_topic=control_topic, kafka=kafka)


# -- the registry read of the declaration check --------------------------------------------------------

_REGISTRY_LOCK = threading.Lock()
_REGISTRY_READS: dict[str, Future[RegistryView]] = {}


def registry(kafka: KafkaSettings, names: Names, timeout: float = 10) -> RegistryView:
    """read_registry; an instance asking while another instance of this process reads the same registry takes
    that read's view instead of reading the whole topic again (a read that began before it asked: as if the two
    had started at the same moment in two processes). A read that ended is never reused."""
    key = _key(_reader_conf(kafka), names.registry)
    with _REGISTRY_LOCK:
        reading = _REGISTRY_READS.get(key)
        if reading is None:
            reading = _REGISTRY_READS[key] = Future()
            mine = True
        else:
            mine = False
    if not mine:
        return reading.result()
    try:
        view = read_registry(kafka, names, timeout=timeout)
    except BaseException as exc:
        reading.set_exception(exc)
        raise
    else:
        reading.set_result(view)
        return view
    finally:
        with _REGISTRY_LOCK:
            del _REGISTRY_READS[key]
