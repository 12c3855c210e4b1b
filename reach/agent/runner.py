"""The instance's main loop: consume the inbox, dispatch under a concurrency limit, commit acked prefixes."""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from reach import heap, policyfields
from reach.agent import inbox, shared
from reach.agent.agent import Agent, call_hook
from reach.agent.ending import Unfenced
from reach.agent.exceptions import DeliveryFailed, RecordRefused
from reach.agent.heartbeat import Heartbeat
from reach.agent.idempotency import Leases
from reach.agent.keyledger import KafkaKeyLedger
from reach.agent.loadreport import LoadReporter
from reach.agent.memorymark import MemoryMark
from reach.agent.metrics import AgentMetrics
from reach.agent.modes import check_registration
from reach.agent.offsets import OffsetTracker
from reach.agent.outage import Outage
from reach.agent.ownership import Ownership
from reach.agent.pipeline import Pipeline
from reach.agent.policy import AgentControl, Mode
from reach.agent.publisher import when_acked
from reach.agent.redisguard import REDIS_ERRORS
from reach.agent.retrying import RetryStep
from reach.agent.statuscheck import AlreadyCompleted, StatusCheck
from reach.core.commits import CommitLedger
from reach.core.views.controlview import key_of
from reach.errors import InfraUnavailable
from reach.kafka import clients, codec, topics
from reach.kafka.types import Consumer, Message, TopicPartition
from reach.names import Names
from reach.records import AgentState, ControlKind, Envelope
from reach.redisclient import AsyncRedis, async_client
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.webclient import auth_headers

log = logging.getLogger("reach.agent")
POLL_S = 0.1
IDLE_POLL_S = 1.0  # nothing in flight: a stop, a DRAIN or DISABLE is seen within this (decision 0073)
# an empty inbox fetch waits this long at the broker (a record is still answered at once): at the `hot` 100 ms
# every idle instance sent ten fetches a second (decision 0073); an agent's consumer_config may set another
INBOX_FETCH_WAIT_MS = 500
SESSION_TIMEOUT_MS = 10_000  # the inbox consumer's default; an agent's consumer_config may set another
HEARTBEAT_INTERVAL_MS = 3_000  # librdkafka's default
REDIS_TIMEOUT_S = 2.0  # a hung Redis must not hang handlers: it degrades to the status table instead
# the asynchronous commit goes out at most this often (decision 0044, addendum): at a paced rate one commit in
# flight alone sent about one OffsetCommit per message; revoke and shutdown still commit synchronously
COMMIT_EVERY_S = 0.1


def _session_times(config: dict[str, Any]) -> tuple[float, float]:
    """(session timeout, heartbeat interval) in seconds, as the inbox consumer will be configured."""
    session = float(config.get("session.timeout.ms", SESSION_TIMEOUT_MS)) / 1000
    return session, float(config.get("heartbeat.interval.ms", HEARTBEAT_INTERVAL_MS)) / 1000


@dataclass(frozen=True)
class Done:
    """A message's work finished (error None: everything it caused is acknowledged), or a handler slot freed."""

    partition: int
    offset: int
    error: BaseException | None = None
    slot: bool = False  # True: a running handler ended (its offset's outcome comes in its own Done)
    msg: Message | None = None  # the inbox record, for dead-lettering it when the SDK itself failed on it
    letter: inbox.BadRecord | None = None  # set when this Done is the ack of the record's own dead letter


class Runner:
    """Owns the consumer (main thread), an asyncio loop thread for handlers, and the acks thread."""

    def __init__(self, agent: Agent, *, kafka: KafkaSettings, redis: RedisSettings,
                 settings: ReachSettings) -> None:
        self.agent = agent
        self._kafka = kafka
        self._redis_settings = redis
        self._settings = settings
        self.names = Names(self._settings.namespace)
        self.inbox = self.names.inbox(agent.agent_id)
        self._stop = threading.Event()
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._tracker = OffsetTracker()
        self._ledger = CommitLedger(every_s=COMMIT_EVERY_S)  # one in flight, on a short timer (reach.core.commits)
        self._backlog: deque[tuple[Message, Envelope]] = deque()
        self._owned: set[int] = set()
        session_s, heartbeat_s = _session_times(agent.consumer_config)
        # a freeze of half the session timeout may have cost the partitions: handlers wait for the group's word
        self._ownership = Ownership(stale_s=session_s / 2, settle_s=2 * heartbeat_s)
        self._named: list[int] = []  # the partitions the last registration named (see _advertised)
        self._empty_since: float | None = None
        self._keep_named_s = 2 * session_s
        self._inflight = 0
        self._running: Counter[int] = Counter()  # running handlers per partition (what a revoke waits for)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._paused = False
        self._ready = False
        self._closing = False
        self._fatal: BaseException | None = None
        self._tiers: list[str] = []
        self._ledger_topic = False
        self._sessions_topic = False  # a topics file without it: ctx.session is not written back
        self._registry = Outage(base_s=0.5, max_s=10.0)  # the Schema Registry: while it is out, read nothing
        self._stalled: set[int] = set()  # partitions of this batch sought back to a record to read again
        self._mode = Mode.RUN  # what the operator's control records ask of this instance (DISABLE, DRAIN)
        # one consumer tails cancels and control (decision 0044): the cancel book and the control view; one per
        # process, shared by its instances (reach.agent.shared, decision 0073)
        self._cancels = shared.cancel_feed(topic=self.names.cancels, control_topic=self.names.control,
                                           kafka=self._kafka)
        self._policies = AgentControl(self._cancels, instance_id=agent.instance_id)

    # -- lifecycle ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin a clean shutdown (safe from any thread or a signal handler)."""
        self._stop.set()

    def run(self, *, install_signals: bool = True) -> None:
        """Register, consume until stopped, drain, tombstone. Raises the fatal error if one stopped it."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        self._ensure_topics()
        now = time.time_ns() // 1_000_000  # modes, contracts, dependencies: refused before anything registers
        starting = self.agent.registration(state=AgentState.STARTING, heartbeat_at=now, inbox_topic=self.inbox,
                                           inflight=0, assigned_partitions=[])
        check_registration(starting, kafka=self._kafka, names=self.names, now_ms=now, registry=shared.registry)
        self._loop = asyncio.new_event_loop()
        loop_thread = threading.Thread(target=self._loop.run_forever, name="reach-handlers", daemon=True)
        loop_thread.start()
        # the process's producer (0073); this handle's close is its own. Its receipts spread over the receipts
        # partitions, one produce request per partition batch: the `receipts` profile lingers (decision 0071)
        self.publisher = shared.publisher(self._kafka)
        self._pool = ThreadPoolExecutor(self.agent.max_concurrency, thread_name_prefix="reach-handler")
        # a lease, its renewals and the result cache per running handler: size the pool from max_concurrency
        redis = async_client(self._redis_settings.url(), max_connections=2 * self.agent.max_concurrency + 16,
                             socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        leases = Leases(redis, namespace=self.names.namespace, owner=self.agent.instance_id,
                        result_ttl_s=self.agent.result_ttl_s)
        self._start_control()  # and the cancels: one feed
        redis_outage = Outage()  # one backoff for every Redis call: handlers' leases and the retry cache
        unfenced = Unfenced()  # and one backlog of the endings published while it was out
        retries = RetryStep(agent_id=self.agent.agent_id, instance_id=self.agent.instance_id,
                            publisher=self.publisher, names=self.names, tiers=self._tiers, leases=leases,
                            policy=self._policies.policy, redis_outage=redis_outage, unfenced=unfenced)
        status = StatusCheck(f"http://{self._settings.web_host}:{self._settings.web_port}",
                             auth=auth_headers(self._settings))

        async def completed(message_id: str, generation: int) -> AlreadyCompleted | None:
            return await asyncio.get_running_loop().run_in_executor(None, status.completed, message_id, generation)
        self.metrics = AgentMetrics(agent_id=self.agent.agent_id, port=self.agent.metrics_port)
        # Order matters: the retry (or dead letter) is published before metrics count the outcome.
        self._pipeline = Pipeline(self.agent, publisher=self.publisher, leases=leases,
                                  receipts_topic=self.names.receipts, executor=self._pool,
                                  middleware=[retries, self.metrics, *self.agent.middleware], completed=completed,
                                  redis_outage=redis_outage, unfenced=unfenced, policy=self._policies.policy,
                                  cancelled=self._cancels.book.cancelled, admitted=self._ownership.admitted,
                                  currency=self._settings.currency,
                                  memory=MemoryMark(redis, namespace=self.names.namespace),
                                  ledger=KafkaKeyLedger(topic=self.names.idempotency, kafka=self._kafka,
                                                        capabilities=self.agent.capabilities)
                                  if self._ledger_topic else None,
                                  sessions_topic=self.names.sessions if self._sessions_topic else None)
        self.heartbeat = Heartbeat(self.agent, self.publisher, registry_topic=self.names.registry,
                                   inbox_topic=self.inbox)
        self.loads = LoadReporter(self.agent, publish=self.publisher.send, topic=self.names.loads,
                                  policy=self._policies.policy)
        try:
            self._call(self._ping(redis))
            self._beat(AgentState.STARTING).result(timeout=30)
            for hook in self.agent.start_hooks:
                self._call(call_hook(hook))
            self._ownership.start()
            self._consumer = self._subscribe()
            self._consume()
            self._drain()
        finally:
            self._ownership.stop()
            self._close(redis)
            self._loop.call_soon_threadsafe(self._loop.stop)
            loop_thread.join(timeout=5)
            self._pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(self._fatal, DeliveryFailed):
            raise InfraUnavailable(f"{self.agent.instance_id} stopped: {self._fatal}. Uncommitted messages "
                                   "will be redelivered; check the broker, then restart.") from self._fatal
        if self._fatal is not None:
            raise self._fatal

    def _ensure_topics(self) -> None:
        spec = topics.load(self._settings.topics_file)
        self._tiers = spec.retry_tiers()
        admin = clients.admin(self._kafka)
        clients.check_reachable(admin, topic=self.names.registry)  # one topic's metadata, not the cluster's
        topics.ensure_topic(admin, self.inbox, spec.inbox(self.agent.agent_id))  # sized by agent (0068)
        ledger = spec.resolved(self.names).get(self.names.idempotency)
        self._ledger_topic = ledger is not None  # a topics file without it: business keys live in Redis only
        if ledger is not None:
            topics.ensure_topic(admin, self.names.idempotency, ledger)
        sessions = spec.resolved(self.names).get(self.names.sessions)
        self._sessions_topic = sessions is not None
        if sessions is not None:
            topics.ensure_topic(admin, self.names.sessions, sessions)
        for name in self.agent.capabilities:
            topics.ensure_topic(admin, self.names.capability(name), spec.family("cap"))

    def _start_control(self) -> None:
        try:
            self._policies.start()
        except Exception as exc:  # noqa: BLE001 - built-in policy meanwhile; operators see the warning
            log.warning("cannot follow the control topic %s (%s): this instance uses the built-in policy and will "
                        "not see DRAIN / DISABLE. Run `reach topics apply`.", self.names.control, exc)
        for name in self.agent.capabilities:  # the same check `reach policy show|set` prints
            for warning in policyfields.check(self._policies.policy(name), self._tiers):
                log.warning("policy of %s: %s (see `reach policy show --capability %s`)", name, warning, name)

    def _obey(self) -> None:
        """Follow the operator: DRAIN stops the loop (drain, deregister, exit); DISABLE pauses the inbox."""
        mode = self._policies.mode()
        if mode is self._mode:
            return
        log.warning("control: instance %s is now in mode %s", self.agent.instance_id, mode)
        self._mode = mode
        if mode is Mode.DRAIN:
            self.stop()

    async def _ping(self, redis: AsyncRedis) -> None:
        try:
            await redis.ping()
        except REDIS_ERRORS as exc:  # Redis is a cache: start degraded rather than not at all
            log.warning("Redis does not answer (%s); starting without leases and caches (the status table "
                        "is asked before each run). Check REACH_REDIS_URL or run `reach local up`.", exc)

    def _subscribe(self) -> Consumer:
        conf = {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": SESSION_TIMEOUT_MS,
                "fetch.wait.max.ms": INBOX_FETCH_WAIT_MS,
                "client.id": self.agent.instance_id,
                "on_commit": functools.partial(clients.on_commit, self._ledger), **self.agent.consumer_config}
        consumer = clients.consumer(self.names.agent_group(self.agent.agent_id), self._kafka, **conf)
        consumer.subscribe([self.inbox], on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_lost)
        return consumer

    # -- the loop -------------------------------------------------------------------------------------

    def _consume(self) -> None:
        # the batch window opens only while reads return more than one record (a rate worth waiting for), so a
        # request at a low rate never waits for it; at moderate rates a read holds rate x window records and
        # costs one wake-up of the handlers' loop, one Redis pipeline and one receipts flush (decision 0056)
        window, most = 0.0, max(self._settings.agent_batch_window_ms, 0) / 1000
        while not self._stop.is_set():
            room = self.agent.max_concurrency + self.loads.max_queue - self._busy() - len(self._backlog)
            self._stalled.clear()
            messages = clients.take(self._consumer, max(1, room), self._poll_s(), window_s=window)
            for msg in messages:
                self._take(msg)
            window = most if len(messages) > 1 else 0.0
            self._settle()

    def _poll_s(self) -> float:
        """POLL_S while anything is in flight (completions wait for this loop); IDLE_POLL_S otherwise: a record
        still ends the poll at once, and an idle instance wakes once a second instead of ten times (0073)."""
        busy = self._busy() or self._backlog or self._tracker.pending() or not self._done.empty()
        return POLL_S if busy else IDLE_POLL_S

    def _settle(self) -> None:
        """Control, completions -> commits, backlog -> handlers, pause/resume, heartbeat."""
        self._obey()
        self._drain_done()
        self._commit(asynchronous=True)
        batch = []
        while self._backlog and self._busy() < self.agent.max_concurrency and not self._closing:
            batch.append(self._dispatch(*self._backlog.popleft()))
        if batch:  # one wake-up of the handlers' loop per batch, not a thread-safe future per message
            self._loop.call_soon_threadsafe(self._start, batch)
        self._flow()
        if self.heartbeat.due():
            self._beat()
        self.loads.tick(inflight=self._busy(), queued=len(self._backlog))

    def _take(self, msg: Message) -> None:
        if msg.error():
            log.warning("consumer: %s", msg.error())
            return
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if partition not in self._owned or partition in self._stalled:
            return  # a stalled partition's later records come again after the one sought back to
        try:
            read = inbox.read(msg.value(), inbox.headers_of(msg))
        except codec.RegistryUnavailable as exc:  # infrastructure, not this record: read it again after a backoff
            self._read_again(partition, offset, exc)
            return
        self._registry.recovered()
        self._tracker.add(partition, offset)
        if isinstance(read, inbox.BadRecord):
            self._dead_letter(read, inbox.Origin(self.inbox, partition, offset))
        else:
            self._backlog.append((msg, read))

    def _read_again(self, partition: int, offset: int, error: codec.RegistryUnavailable) -> None:
        """Leave the offset uncommitted, seek back to it and pause the inbox for the registry's backoff."""
        if not self._registry.down:
            log.warning("the schema registry does not answer (%s); reading nothing until it does, then "
                        "%s:%d@%d again", error, self.inbox, partition, offset)
        self._registry.failed()
        self._stalled.add(partition)
        self._consumer.seek(TopicPartition(self.inbox, partition, offset))
        self._flow()

    def _busy(self) -> int:
        """Handler slots in use: running handlers plus sync handlers' threads still running past their timeout."""
        return self._inflight + self._pipeline.lingering

    def _dispatch(self, msg: Message, envelope: Envelope) -> tuple[Message, Envelope]:
        self._inflight += 1
        self._running[msg.partition() or 0] += 1
        self.metrics.set_inflight(self._busy())
        return msg, envelope

    def _start(self, batch: list[tuple[Message, Envelope]]) -> None:
        """On the handlers' loop: one task per message; its completion goes to the main thread's queue."""
        for msg, envelope in batch:
            work = self._pipeline.process(envelope, inbox.headers_of(msg), raw=msg.value(),
                                          origin=(self.inbox, msg.partition() or 0, msg.offset() or 0))
            task = self._loop.create_task(work)
            self._tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(functools.partial(self._finished, msg))

    def _finished(self, msg: Message, future: asyncio.Future[Any]) -> None:
        self._tasks.discard(future)  # type: ignore[arg-type]
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if future.cancelled():  # only at shutdown: the offset stays uncommitted and is redelivered
            log.warning("the run of %s:%d@%d was cancelled; it will be redelivered", self.inbox, partition, offset)
        elif future.exception() is not None:
            self._done.put(Done(partition, offset, future.exception(), msg=msg))
        else:  # done once the receipts the pipeline did not wait for are acknowledged
            acks = list(future.result().acks)
            when_acked(acks, lambda error: self._done.put(Done(partition, offset, error, msg=msg)))
        self._done.put(Done(partition, offset, slot=True))

    def _dead_letter(self, bad: inbox.BadRecord, origin: inbox.Origin) -> None:
        value, headers = inbox.dead_letter(bad, origin, self.agent.agent_id)
        key = bad.message_id or f"{origin.topic}:{origin.partition}:{origin.offset}"
        acks = [self.publisher.send(self.names.dlq, key, value, headers=headers)]
        # a letter rewritten by reference sends its receipt again: the first one's ack may have failed too
        rejected = inbox.rejected_receipt(bad, self.agent.agent_id, self.agent.instance_id)
        if rejected is not None:
            acks.append(self.publisher.send(self.names.receipts, rejected.message_id, codec.encode(rejected)))
        log.warning("dead-lettered %s:%d@%d: %s", origin.topic, origin.partition, origin.offset, bad.reason)
        when_acked(acks, lambda error: self._done.put(Done(origin.partition, origin.offset, error, letter=bad)))

    # -- flow control, commits, heartbeats ----------------------------------------------------------------

    def _flow(self) -> None:
        # the queue waits in the backlog, not in a paused inbox: a resumed fetch idled the handlers up to 1 s
        full = (self._busy() + len(self._backlog) >= self.agent.max_concurrency + self.loads.max_queue
                or self._closing or self._mode is not Mode.RUN or not self._registry.available())
        if full and not self._paused and self._owned:
            self._consumer.pause(self._partitions(self._owned))
            self._paused = True
        elif not full and self._paused:
            self._consumer.resume(self._partitions(self._owned))
            self._paused = False

    def _commit(self, *, asynchronous: bool) -> None:
        """Asynchronous: the ledger's commit if none is in flight and its timer is up (the answer arrives in
        clients.on_commit); synchronous (revoke, shutdown): every unconfirmed point now."""
        advanced = self._tracker.advanced()
        if advanced:
            self._ledger.want({(self.inbox, p): o for p, o in advanced.items()})
        if asynchronous:
            clients.send_commits(self._consumer, self._ledger, [(self.inbox, p) for p in self._owned])
        else:
            clients.commit_now(self._consumer, self._ledger)

    def _beat(self, state: AgentState | None = None) -> Future[Message]:
        return self.heartbeat.beat(inflight=self._busy(), partitions=self._advertised(), state=state)

    def _advertised(self) -> list[int]:
        """The partitions the registration names: those owned; while none is (a revoke or loss, then the rejoin's
        empty first assignment), the last ones named, for up to two session timeouts. A registration with no
        partition makes the router end this agent's messages UNROUTABLE (NO_ROUTE) until the group assigns them
        again: when both instances' sessions timed out together during a leader SIGKILL, that ended 2,824 of
        4,110 messages in 4 s. Records routed to the last-named partitions meanwhile wait in the inbox for
        whichever instance the group gives them to."""
        now = time.monotonic()
        if self._owned:
            self._named, self._empty_since = sorted(self._owned), None
            return self._named
        if self._closing:
            return []
        if self._empty_since is None:
            self._empty_since = now
        return self._named if now - self._empty_since < self._keep_named_s else []

    def _partitions(self, parts: set[int]) -> list[TopicPartition]:
        return [TopicPartition(self.inbox, p) for p in sorted(parts)]

    # -- rebalance callbacks (run inside consumer.poll on the main thread) -------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        self._owned |= {tp.partition for tp in partitions}
        self._ownership.assigned(self._owned)
        if self._paused and partitions:
            consumer.pause(partitions)
        state = None
        if not self._ready and not self._closing:
            self._ready, state = True, AgentState.READY
            heap.settle()  # the first assignment ends start-up; full collections then skip what it built
        self._beat(state)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {tp.partition for tp in partitions}
        self._ownership.revoked(revoked)  # first: a handler not started yet there is left to the next owner
        # Backlog that never started is simply not committed (its new owner reads it again); only handlers
        # already running are worth waiting for, so their outcome's offset can be committed before handover.
        self._backlog = deque(item for item in self._backlog if item[0].partition() not in revoked)
        deadline = time.monotonic() + (0 if self._closing else min(self.agent.drain_grace_s, 10.0))
        while any(self._running[p] for p in revoked) and time.monotonic() < deadline:
            self._wait_done(0.05)
        self._drain_done()
        self._commit(asynchronous=False)
        self._forget(revoked)
        consumer.incremental_unassign(partitions)
        self._beat()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._forget({tp.partition for tp in partitions})
        consumer.incremental_unassign(partitions)
        self._beat()

    def _forget(self, partitions: set[int]) -> None:
        self._ownership.revoked(partitions)
        self._tracker.forget(partitions)
        self._ledger.forget((self.inbox, p) for p in partitions)
        self._owned -= partitions
        self._backlog = deque(item for item in self._backlog if item[0].partition() not in partitions)

    def _wait_done(self, timeout: float) -> None:
        try:
            item = self._done.get(timeout=timeout)
        except queue.Empty:
            return
        self._apply(item)

    def _drain_done(self) -> None:
        while True:
            try:
                self._apply(self._done.get_nowait())
            except queue.Empty:
                return

    def _apply(self, item: Done) -> None:
        if item.slot:
            self._inflight -= 1
            self._running[item.partition] -= 1
            self.loads.completed()
            self.metrics.set_inflight(self._busy())
        elif isinstance(item.error, RecordRefused) and item.letter is not None and item.letter.raw:
            # The dead letter itself was refused for good (e.g. the original is over the dlq's limit): write it
            # by reference (empty envelope + origin), as the router does; replay reads the original from origin.
            log.warning("the dead letter of %s:%d@%d was refused (%s); writing it by reference", self.inbox,
                        item.partition, item.offset, item.error)
            self._dead_letter(inbox.by_reference(item.letter, item.error), inbox.Origin(self.inbox, item.partition,
                              item.offset))
        elif isinstance(item.error, DeliveryFailed) and not isinstance(item.error, RecordRefused):
            log.error("stopping, the message stays uncommitted: %s", item.error)
            self._fatal = self._fatal or item.error
            self._stop.set()
        elif item.error is not None and item.msg is not None:
            # Not the broker's fault: the SDK failed on this one record. Isolate it (dead letter + REJECTED).
            log.error("failed on %s:%d@%d, dead-lettering it: %r", self.inbox, item.partition, item.offset,
                      item.error, exc_info=item.error)
            self._dead_letter(inbox.failed(item.msg.value() or b"", inbox.headers_of(item.msg), item.error),
                              inbox.Origin(self.inbox, item.partition, item.offset))
        elif item.error is not None:
            log.error("stopping, the message stays uncommitted: %s", item.error)
            self._fatal = self._fatal or item.error
            self._stop.set()
        else:
            self._tracker.done(item.partition, item.offset)

    # -- shutdown -------------------------------------------------------------------------------------

    def _drain(self) -> None:
        """DRAINING: take no new work, finish in-flight work within the grace period, commit."""
        self._closing = True
        self._backlog.clear()
        self._flow()
        self._beat(AgentState.DRAINING)
        deadline = time.monotonic() + self.agent.drain_grace_s
        while self._inflight > 0 and time.monotonic() < deadline:
            self._consumer.poll(POLL_S)
            self._drain_done()
            self._commit(asynchronous=True)
        self._drain_done()
        self._commit(asynchronous=False)
        if self._inflight:
            log.warning("%d handler(s) still running after %.0fs; their messages will be redelivered",
                        self._inflight, self.agent.drain_grace_s)

    def _close(self, redis: AsyncRedis) -> None:
        policies = getattr(self, "_policies", None)
        if policies is not None:
            policies.stop()
        cancels = getattr(self, "_cancels", None)
        if cancels is not None:
            cancels.stop()
        consumer = getattr(self, "_consumer", None)
        if consumer is not None:
            consumer.close()
        for hook in self.agent.stop_hooks:
            try:
                self._call(call_hook(hook), timeout=self.agent.drain_grace_s)
            except Exception:  # noqa: BLE001 - a failing hook must not keep the instance registered
                log.exception("on_stop hook failed")
        self._deregister()
        self.publisher.close()
        try:
            self._call(redis.aclose(), timeout=5)
        except Exception:  # noqa: BLE001 - closing a dead connection is not an error
            pass

    def _deregister(self) -> None:
        """Tombstone the registration; after a DRAIN also its control record: the DRAIN was for this run, so a
        later instance started with the same id is not drained at once."""
        self.heartbeat.tombstone()
        if self._mode is Mode.DRAIN:
            self.publisher.send(self.names.control, key_of(ControlKind.INSTANCE, self.agent.instance_id), None)

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)
