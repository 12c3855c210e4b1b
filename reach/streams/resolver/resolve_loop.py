"""The intent resolver: a worker in front of the router that turns `intent.resolve` envelopes into capabilities.

It reads `<ns>.intents` (group `<ns>.resolver`), keeps the registry and control views current (the
router's StateLoop), resolves each intent with the pure reach.intent.stages (exact map, then the
semantic stage's embeddings, then dual dispatch or handoff), and produces what reach.intent.dispatch
plans: an INTENT_RESOLVED receipt, then the envelope forwarded to its capability topic, two child
messages, or a handoff record. An input offset is committed once everything it caused is acknowledged.
Dual-dispatch children reply to this worker's own reply topic (`<ns>.replies.resolver-<id>`, read by the
group `<ns>.resolver-replies.<id>`); the first valid answer completes the request. Pending pairs are
stored on `<ns>.dual-pairs` and a reply offset is committed once what it caused is acknowledged, so a
worker restarted with the same id (REACH_RESOLVER_ID, default the host name) restores its pairs and
completes them from the replies it had not committed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections import ChainMap, deque
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach import dlq
from reach.envelopes import now_ms
from reach.errors import InvalidName
from reach.intent import catalog, dispatch, mappings
from reach.intent import handoff as handoffs
from reach.intent.cache import RouteCache
from reach.intent.dual import DualTracker, Outcome, PairRecord
from reach.intent.errors import IntentModelMissing, ResolverIdInUse
from reach.intent.feedback import Feedback
from reach.intent.model import Embedder, shared_model
from reach.intent.semantic import SemanticIndex
from reach.intent.stages import Mapping_, Resolution, Thresholds, resolve
from reach.intent.text import normalize
from reach.kafka import clients, delivery, topicreader
from reach.kafka import headers as H
from reach.kafka.acks import Acks, Position
from reach.kafka.codec import DecodeError, RegistryUnavailable, decode, decode_dict, encode, encode_dict
from reach.kafka.types import OFFSET_END, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from reach.names import Names
from reach.records import ErrorInfo, Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams import groupadmin
from reach.streams.groupadmin import GroupRequests
from reach.streams.router.route_loop import MAX_ENVELOPE_BYTES, dead_letter_bytes
from reach.streams.router.state import RouterState, StateLoop
from reach.streams.supervised import SupervisedLoop
from reach.terminals import Fence, Terminal, fence_from_settings

log = logging.getLogger("reach.resolver")
LATENCY_SAMPLES = 10_000
REFRESH_S = 0.5  # how often the catalog is compared with the registry and control views
REPLY_SESSION_MS = 6_000  # the reply consumer's session timeout
ID_RECHECK_S = 10.0  # how often a running worker looks for another worker holding its id
ID_CHECK_S = 5.0  # the longest wait for one description of the reply group at start
ID_WAIT_S = REPLY_SESSION_MS / 1000 + 4.0  # a crashed holder's session expires within this; a live one stays
SERVED_TENANTS = 10_000  # per-tenant served sets kept per catalog version


def _host_id() -> str:
    return socket.gethostname()


def _client_id(worker_id: str, started_ms: int) -> str:
    """Who holds a reply group, as the id checks name it: the id, the host, the process and when it started."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname())[:60]
    return f"resolver-{worker_id}.{host}.{os.getpid()}.{started_ms}"


def yields_to(mine: str, members: list[str]) -> str | None:
    """The member of this worker's reply group that this worker gives the id up to, if any: one that started
    earlier (by the start time that ends its client id; ties by client id), or one whose start is not known
    (an older resolver). Two workers that see each other decide alike, so exactly one of them stops."""
    def started(client_id: str) -> int | None:
        tail = client_id.rsplit(".", 1)[-1]
        return int(tail) if tail.isdigit() and client_id != tail else None

    me = started(mine)
    for other in sorted(members):
        if other == mine:
            continue
        at = started(other)
        if at is None or me is None or (at, other) < (me, mine):
            return other
    return None


class ResolverSettings(BaseSettings):
    """The worker's id (env REACH_RESOLVER_ID, default the host name): its reply topic and reply group. Keep it
    across restarts so pending dual dispatches survive one; give each worker on one host its own."""

    model_config = SettingsConfigDict(env_prefix="REACH_RESOLVER_", frozen=True)

    id: str = Field(default_factory=_host_id)

    @field_validator("id")
    @classmethod
    def _as_client_id(cls, value: str) -> str:
        """A reply-topic client id: lower-case letters, digits and '-' (other characters become '-')."""
        cleaned = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:40]
        return cleaned or "resolver"


class Resolver(SupervisedLoop):
    """One resolver worker: start()/stop(); several share `<ns>.intents` through their consumer group."""

    thread_name = "reach-resolver"
    restart_on = (KafkaException, RegistryUnavailable)
    stop_timeout_s = 15.0
    log = log

    def __init__(self, *, kafka: KafkaSettings, reach: ReachSettings, redis: RedisSettings, thresholds: Thresholds,
                 embedder: Callable[[], Embedder] = shared_model, worker_id: str,
                 fence: Fence | None = None, groups: Callable[[], GroupRequests] | None = None) -> None:
        super().__init__()
        self.kafka = kafka
        self.settings = reach
        self.names = Names(self.settings.namespace)
        # a dual pair's parent may have ended meanwhile (the timekeeper's EXPIRED): its first ending stands
        self.fence = fence or fence_from_settings("resolver", namespace=self.names.namespace,
                                                  redis_settings=redis)
        self.thresholds = thresholds
        self.worker_id = ResolverSettings(id=worker_id).id  # normalised to a reply-topic client id
        self.reply_topic = self.names.replies(f"resolver-{self.worker_id}")
        self.reply_group = f"{self.names.resolver_group}-replies.{self.worker_id}"
        self.client_id = _client_id(self.worker_id, now_ms())
        kafka_settings = self.kafka
        self._groups = groups or (lambda: groupadmin.shared(kafka_settings))
        self.state = RouterState()
        self._state_loop = StateLoop(state=self.state, names=self.names, kafka=self.kafka)
        self._embedder_factory = embedder
        self._embedder: Embedder | None = None
        self.unavailable = ""  # why the semantic stage cannot run, when it cannot
        self._index: SemanticIndex | None = None
        self._vectors: dict[str, Any] = {}
        self._version: object = None
        self._exact: dict[str, Any] = {}
        self._learned: dict[str, dict[str, Mapping_]] = {}  # per tenant: what its outcomes taught (feedback)
        self._sef: frozenset[str] = frozenset()
        self._live: frozenset[str] = frozenset()
        self._tenancy: dict[str, frozenset[str] | None] = {}
        self._served: dict[str, frozenset[str]] = {}
        self._generics: dict[str, str] = {}
        self._families: dict[str, str] = {}
        self.cache = RouteCache()
        self.dual = DualTracker()
        self.feedback = Feedback()
        self._refreshed = 0.0
        self.latencies_ms: deque[float] = deque(maxlen=LATENCY_SAMPLES)  # per resolution, cache misses only
        self.counts: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, *, ready_timeout: float = 30.0) -> None:
        """Refuse an id a running resolver holds; load the model (or note why not), read registry and control,
        ensure the reply topic, start the loop."""
        self.check_id_free()
        try:
            self._embedder = self._embedder_factory()
        except IntentModelMissing as exc:
            self.unavailable = str(exc)
            log.error("semantic stage unavailable (exact map and handoff only): %s", exc)
        from reach import client as sdk

        with sdk.Client(kafka=self.kafka, settings=self.settings, follow_control=False) as client:
            client.ensure_topic(self.reply_topic)
        self._state_loop.start()
        self._state_loop.wait_loaded(ready_timeout)
        super().start()

    def check_id_free(self, *, wait_s: float | None = None, every_s: float = 1.0) -> None:
        """Raise ResolverIdInUse when the reply group keeps a member for longer than a session timeout: a
        resolver with this id is running (on this host, when the id is the default host name). A member that
        crashed leaves the group within its session timeout, so a restart after a crash waits that long, and a
        group that cannot be described proves nothing: the worker starts and says so."""
        deadline = time.monotonic() + (ID_WAIT_S if wait_s is None else wait_s)
        while True:
            try:
                members = self.describe_reply_group().result(timeout=ID_CHECK_S + 1).members
            except Exception as exc:  # noqa: BLE001 - a timeout, a principal that may not describe, a dead child
                log.warning("could not check that no running resolver holds the id %r (%s): starting",
                            self.worker_id, exc)
                return
            if not members:
                return
            if time.monotonic() >= deadline:
                raise ResolverIdInUse(
                    f"a running resolver already uses the id {self.worker_id!r} (its reply group {self.reply_group} "
                    f"has {len(members)} member(s): {', '.join(sorted(m.client_id for m in members))}); give each "
                    "resolver its own REACH_RESOLVER_ID, and keep it across restarts")
            log.info("the reply group %s still has %d member(s): waiting for a crashed one's session to expire",
                     self.reply_group, len(members))
            time.sleep(every_s)

    def describe_reply_group(self) -> Any:
        """The future of the reply group's description (its `.members` carry their client ids)."""
        return self._groups().describe_consumer_groups([self.reply_group],
                                                       request_timeout=ID_CHECK_S)[self.reply_group]

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        self._state_loop.stop(self.stop_timeout_s if timeout is None else timeout)

    def healthy(self) -> bool:
        return super().healthy() and self._state_loop.error is None

    @property
    def capabilities(self) -> frozenset[str]:
        """The capabilities the catalog holds now (live registrations)."""
        return self._live

    # -- resolving (no I/O) ----------------------------------------------------------------------------

    def refresh(self, now: int) -> None:
        """Rebuild the catalog, exact map and index when the registrations or the INTENT records changed."""
        live = self.state.live(now)
        records = self.state.control.records()
        entries = catalog.build(live)
        operator = mappings.operator_map(records)
        for phrase, mapping in operator.items():  # an operator's phrase also teaches the semantic stage
            if mapping.capability in entries and mapping.confidence >= self.thresholds.exact_floor:
                entries[mapping.capability].add(phrase)
        tenancy = catalog.tenancy(live)
        exact = mappings.exact_map(catalog.seeds(entries), records)
        learned = mappings.learned_map(exact, records)
        version = (tuple(sorted((e.capability, tuple(e.texts), e.side_effect_free, e.generic, e.family)
                                for e in entries.values())),
                   tuple(sorted((p, m.capability, m.confidence) for p, m in operator.items())),
                   tuple(sorted((c, None if t is None else tuple(sorted(t))) for c, t in tenancy.items())),
                   tuple(sorted((t, tuple(sorted(m.items()))) for t, m in learned.items())))
        if version == self._version:
            return
        self._version = version
        self._exact = exact
        self._learned = learned
        self._live = frozenset(entries)
        self._tenancy = tenancy
        self._served = {}
        self._generics = catalog.generics(entries)
        self._families = catalog.families(entries)
        self._sef = frozenset(e.capability for e in entries.values() if e.side_effect_free)
        if self._embedder is not None:
            self._index = SemanticIndex(self._embedder, entries, self._vectors)
        log.info("intent catalog: %d capabilities, %d exact phrases", len(entries), len(self._exact))

    def served(self, tenant: str) -> frozenset[str]:
        """The catalog's capabilities a live instance serves for `tenant` (the router's tenant filter)."""
        found = self._served.get(tenant)
        if found is None:
            found = catalog.served(self._live, self._tenancy, tenant)
            if len(self._served) < SERVED_TENANTS:  # tenants come from requests: bounded
                self._served[tenant] = found
        return found

    def resolve(self, intent: str, tenant: str = "default") -> Resolution:
        live = self.served(tenant)
        phrase = normalize(intent)
        learned = self._learned.get(tenant, {}).get(phrase)
        # tenants served by the same capabilities share resolutions, unless one's outcomes taught it otherwise
        key = (phrase, live, tenant if learned is not None else None)
        cached = self.cache.get(key, self._version)
        if cached is not None:
            return Resolution(cached.stage, intent, cached.capability, cached.candidates, cached.dual, cached.note)
        started = time.perf_counter()
        exact: Mapping[str, Mapping_] = self._exact if learned is None else ChainMap({phrase: learned}, self._exact)
        resolution = resolve(intent, exact=exact, live=live, side_effect_free=self._sef,
                             rank=self._index.rank if self._index is not None else None,
                             thresholds=self.thresholds, generics=self._generics, families=self._families,
                             unavailable=self.unavailable or "the model is not loaded")
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        self.cache.put(key, resolution)
        return resolution

    # -- the loop --------------------------------------------------------------------------------------

    def _loop(self) -> None:
        consumer = clients.consumer(self.names.resolver_group, self.kafka, profile="hot",
                                    **{"session.timeout.ms": 6_000, "heartbeat.interval.ms": 1_500})
        replies = clients.consumer(self.reply_group, self.kafka, profile="hot",
                                   **{"session.timeout.ms": REPLY_SESSION_MS, "heartbeat.interval.ms": 1_500,
                                      "client.id": self.client_id})
        # feedback: from now on, no group
        outcomes = topicreader.open_reader("resolver-outcomes", self.kafka, profile="feed")
        producer = clients.producer(self.kafka, profile="hot",
                                    **{"message.max.bytes": dead_letter_bytes(self.settings)})
        try:
            early = self.dual.early  # answers kept for pairs not tracked yet, their offsets already committed
            self.dual = self._restore_pairs(producer)  # what this id left pending, as the pairs topic has it
            self._settle(producer, self.dual.answered_all(early))
            clients.assign(outcomes, self.names.receipts,
                           dict.fromkeys(topicreader.partitions(outcomes, self.names.receipts), OFFSET_END))
            replies.subscribe([self.reply_topic])
            consumer.subscribe([self.names.intents])
            self._mark_ready()  # a restart after an infrastructure error has recovered
            holders = _IdWatch(self, time.monotonic())
            while not self._stop.is_set():
                if time.monotonic() - self._refreshed >= REFRESH_S:
                    self.refresh(now_ms())
                    self._refreshed = time.monotonic()
                holders.check(time.monotonic())
                messages = [m for m in clients.take(consumer, 200, 0.1) if not m.error()]
                if messages:
                    self._batch(consumer, producer, messages)
                answers = [m for m in clients.take(replies, 200, 0.0 if messages else 0.05) if not m.error()]
                if answers:
                    self._answers(producer, answers)
                    replies.commit(asynchronous=False)  # only once what the answers caused is acknowledged
                self._outcomes(producer, [m for m in clients.take(outcomes, 500, 0.0) if not m.error()])
        finally:
            producer.flush(10)
            consumer.close()
            replies.close()
            outcomes.close()

    def _restore_pairs(self, producer: Producer) -> DualTracker:
        """Pending pairs this worker id stored; a pair whose request passed its deadline has ended EXPIRED (the
        timekeeper's), so it is dropped (tombstoned) rather than completed a second time."""
        tracker = DualTracker()
        latest = topicreader.latest_records("resolver-pairs", self.names.dual_pairs, bytes, self.kafka)
        now, stale = now_ms(), []
        for key, value in latest.items():
            try:
                record = PairRecord.model_validate_json(value)
            except ValueError as exc:
                log.warning("skipping a bad dual-pair record %r: %s", key, exc)
                continue
            if record.owner != self.worker_id:
                continue
            if record.deadline is not None and now >= record.deadline:
                stale.append(key)
                continue
            tracker.restore(record)
        for key in stale:
            producer.produce(self.names.dual_pairs, None, key=key.encode())
        if latest:
            log.info("dual dispatch: %d pending pair(s) restored, %d past their deadline dropped", len(tracker),
                     len(stale))
        return tracker

    def _batch(self, consumer: Consumer, producer: Producer, messages: list[Message]) -> None:
        acks = Acks()
        duals: list[tuple[Position, PairRecord]] = []
        for msg in messages:
            position = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)
            acks.seen(position)
            value = msg.value()
            if value is None:
                continue
            try:
                duals.extend((position, record) for record in self._one(producer, acks, position, msg, value))
            except RegistryUnavailable as exc:
                acks.fail(position, exc)
            except Exception as exc:  # noqa: BLE001 - one bad record stops neither the worker nor its partition
                log.exception("resolving %s[%d]@%d failed: dead-lettered", *position)
                acks.reset(position)
                self._letter(producer, acks, position, msg, value, "RESOLVER_ERROR", repr(exc)[:1000])
        producer.flush(30)
        refused = [p for p in acks.unacked() if acks.errors(p) and all(map(delivery.permanent, acks.errors(p)))]
        for position in refused:  # an output the broker refuses for good (too large) would be refused every time
            why = delivery.describe(acks.errors(position)[0])
            acks.reset(position)
            msg = next(m for m in messages if (m.topic(), m.partition(), m.offset()) == position)
            self._letter(producer, acks, position, msg, b"", "REFUSED_BY_BROKER",
                         f"the broker refused a record this envelope caused: {why} (the letter holds no bytes; "
                         f"the original is at {position[0]}[{position[1]}]@{position[2]})")
        if refused:
            producer.flush(30)
        unacked = set(acks.unacked())
        early: list[Outcome] = []
        for position, record in duals:  # a record read again will dispatch its own pair; track only what landed
            if position not in unacked:
                early.extend(self.dual.restore(record))
        if early:  # answers that arrived before their pair was tracked
            self._settle(producer, early)
        commits, rewinds = acks.commits(), acks.rewinds()
        if commits:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commits.items()], asynchronous=False)
        for (topic, partition), offset in rewinds.items():  # read again from the first unacknowledged record
            consumer.seek(TopicPartition(topic, partition, offset))
        if rewinds:
            self._stop.wait(0.5)

    def _letter(self, producer: Producer, acks: Acks, position: Position, msg: Message, value: bytes, code: str,
                why: str) -> None:
        """Dead-letter one record of the intents topic with its reason; the partition moves on once it is acked."""
        self.counts["dead_lettered"] = self.counts.get("dead_lettered", 0) + 1
        letter, headers = dlq.letter(value, reason=code, origin=position,
                                     error=ErrorInfo(kind="INVALID_INPUT", code=code, message=why),
                                     message_id=H.text(H.pairs(msg.headers()), H.MESSAGE_ID))
        delivery.produce(producer, acks, position, self.names.dlq, letter, key=msg.key(), headers=headers)

    def _one(self, producer: Producer, acks: Acks, position: Position, msg: Message,
             value: bytes) -> list[PairRecord]:
        now = now_ms()
        if len(value) > MAX_ENVELOPE_BYTES:  # its handoff record (the envelope inside) would be refused
            self._letter(producer, acks, position, msg, b"", "OVERSIZE",
                         f"the record is {len(value):,} bytes; an intent envelope is at most {MAX_ENVELOPE_BYTES:,}")
            return []
        try:
            envelope = decode_dict("Envelope", value)
        except DecodeError as exc:  # dead-lettered with its reason; the partition moves on
            log.warning("dead-lettering an undecodable record on %s[%d]@%d: %s", *position, exc)
            self.counts["undecodable"] = self.counts.get("undecodable", 0) + 1
            self._letter(producer, acks, position, msg, value, "UNDECODABLE", str(exc))
            return []
        why = dispatch.problem(envelope)
        if why is None and envelope.get("reply_to"):
            try:
                self.names.check_reply_to(envelope["reply_to"])
            except InvalidName as exc:
                why = str(exc)
        if why is not None:
            self._receipt(producer, acks, position, dispatch.receipt(
                envelope, Status.REJECTED, now, error=ErrorInfo(kind="INVALID_INPUT", code="BAD_INTENT", message=why)),
                envelope)
            self.counts["rejected"] = self.counts.get("rejected", 0) + 1
            return []
        tenant = envelope.get("tenant") or "default"
        resolution = self.resolve(envelope["intent"], tenant)
        self.counts[resolution.stage] = self.counts.get(resolution.stage, 0) + 1
        if resolution.stage == "exact" and resolution.capability is not None:
            self.feedback.sent(envelope["message_id"], normalize(resolution.intent), resolution.capability,
                               resolution.candidates[0].score, tenant=tenant,
                               caller_timeout=bool(envelope.get("execution_timeout_ms")))
        duals: list[PairRecord] = []
        children: dict[str, str] = {}
        for out in dispatch.plan(envelope, value, resolution, at=now, reply_topic=self.reply_topic):
            if out.kind == "receipt":
                self._receipt(producer, acks, position, out.value, envelope)
            elif out.kind in ("forward", "child"):
                assert out.capability is not None
                topic = self.names.capability(out.capability)
                headers = [(H.MESSAGE_ID, out.key.encode())]
                delivery.produce(producer, acks, position, topic, encode_dict("Envelope", out.value),
                                 key=(out.value["routing"].get("session_key") or out.key).encode(), headers=headers)
                if out.kind == "child":
                    children[out.key] = out.capability
            else:
                delivery.produce(producer, acks, position, self.names.handoff, handoffs.encode(out.value),
                                 key=out.key.encode())
        if children:  # stored with the children: a restarted worker completes the pair
            record = DualTracker.new_record(envelope, children, owner=self.worker_id)
            delivery.produce(producer, acks, position, self.names.dual_pairs, record.model_dump_json().encode(),
                             key=envelope["message_id"].encode())
            duals.append(record)
        return duals

    def _receipt(self, producer: Producer, acks: Acks, position: Position, receipt: Receipt,
                 envelope: dict[str, Any]) -> None:
        delivery.produce(producer, acks, position, self.names.receipts, encode(receipt),
                         key=receipt.message_id.encode(), headers=_headers(receipt, envelope))

    def _answers(self, producer: Producer, answers: list[Message]) -> None:
        """Children's first terminal receipts: complete, fail or record a discarded branch on the parent."""
        outcomes: list[Outcome] = []
        for msg in answers:
            value = msg.value()
            if value is None:
                continue
            try:
                outcome = self.dual.answered(decode(value, Receipt))
            except DecodeError as exc:
                log.warning("skipping an undecodable reply on %s: %s", self.reply_topic, exc)
                continue
            if outcome is not None:
                outcomes.append(outcome)
        self._settle(producer, outcomes)

    def _settle(self, producer: Producer, outcomes: list[Outcome]) -> None:
        """Each outcome's receipt on the parent, then the pair's new state; all acknowledged, or raise."""
        for outcome in outcomes:
            self._record_outcome(producer, outcome)
            state = outcome.state.model_dump_json().encode() if outcome.state is not None else None
            producer.produce(self.names.dual_pairs, state, key=outcome.parent["message_id"].encode())
        if producer.flush(30):  # not acknowledged: start again from the pairs topic and the committed replies
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "dual-dispatch outcomes not acknowledged"))

    def _outcomes(self, producer: Producer, records: list[Message]) -> None:
        """Terminal receipts of exact-stage forwards: repeated failures the agent caused lower the mapping's
        confidence for the tenant whose requests failed (reach.intent.feedback)."""
        for msg in records:
            message_id = H.text(H.pairs(msg.headers()), H.MESSAGE_ID)
            value = msg.value()
            if message_id is None or value is None or not self.feedback.watching(message_id):
                continue  # most receipts are not ours: no decode
            try:
                receipt = decode(value, Receipt)
            except DecodeError:
                continue
            lowered = self.feedback.ended(receipt.message_id, receipt.status, receipt.error)
            if lowered is not None:  # the tenant's own record: the operator's INTENT:<phrase> stays as it is
                record = mappings.feedback_record(lowered.tenant, lowered.phrase, lowered.capability,
                                                  confidence=lowered.confidence, by=f"resolver-{self.worker_id}")
                producer.produce(self.names.control, encode(record), key=record.key.encode())
                log.warning("intent %r -> %s failed repeatedly for tenant %r: its confidence lowered to %.2f",
                            lowered.phrase, lowered.capability, lowered.tenant, lowered.confidence)

    def _record_outcome(self, producer: Producer, outcome: Outcome) -> None:
        if outcome.action == "wait":
            return  # a failed branch while the other may still answer: only the pair's state changes
        parent, child = outcome.parent, outcome.receipt
        intent = parent.get("intent") or ""
        resolution = dispatch.IntentResolution(stage="dual" if outcome.action != "discard" else "discarded",
                                               intent=intent, capability=outcome.capability,
                                               child_id=outcome.child_id)
        if outcome.action == "complete":
            receipt = dispatch.receipt(parent, Status.COMPLETED, now_ms(), result=child.result,
                                       agent_id=child.agent_id, instance_id=child.instance_id, resolution=resolution)
        elif outcome.action == "fail":
            receipt = dispatch.receipt(parent, Status.FAILED, now_ms(), error=child.error or ErrorInfo(
                kind="BUSINESS", code="DUAL_FAILED", message=f"both branches ended without a result ({child.status})"),
                resolution=resolution)
        else:
            receipt = dispatch.receipt(parent, Status.INTENT_RESOLVED, now_ms(), resolution=resolution)
        value = encode(receipt)
        if receipt.status.is_terminal:  # first terminal wins: a parent that already ended gets that ending again
            [claimed] = self.fence.claim([Terminal(receipt.message_id, receipt.generation, value)])
            value = claimed.receipt
        producer.produce(self.names.receipts, value, key=receipt.message_id.encode(), headers=_headers(receipt, parent))


class _IdWatch:
    """While the worker runs, every ID_RECHECK_S: the reply group's members, asked without blocking the loop. The
    start-time check misses a holder that had not joined yet (both started together, or it was between two
    loop runs); here two workers with one id see each other and the later one stops with ResolverIdInUse."""

    def __init__(self, worker: Resolver, now: float) -> None:
        self.worker = worker
        self.next_at = now + ID_RECHECK_S
        self.pending: Any = None

    def check(self, now: float) -> None:
        if self.pending is None:
            if now < self.next_at:
                return
            try:
                self.pending = self.worker.describe_reply_group()
            except Exception as exc:  # noqa: BLE001 - the next look tries again
                log.debug("describing %s failed: %s", self.worker.reply_group, exc)
                self.next_at = now + ID_RECHECK_S
            return
        if not self.pending.done():
            return
        future, self.pending, self.next_at = self.pending, None, now + ID_RECHECK_S
        try:
            members = [m.client_id for m in future.result().members]
        except Exception as exc:  # noqa: BLE001 - the next look tries again
            log.debug("describing %s failed: %s", self.worker.reply_group, exc)
            return
        holder = yields_to(self.worker.client_id, members)
        if holder is not None:
            raise ResolverIdInUse(
                f"another resolver ({holder}) uses the id {self.worker.worker_id!r} and started first: this one "
                f"({self.worker.client_id}) stops; give each resolver its own REACH_RESOLVER_ID")


def _headers(receipt: Receipt, envelope: dict[str, Any]) -> H.Headers:
    """The message id, and the envelope's reply_to for the status fold (it sends the first terminal there)."""
    reply = envelope.get("reply_to")
    return [(H.MESSAGE_ID, receipt.message_id.encode()), H.status_header(receipt.status.name),
            *([(H.REPLY_TO, reply.encode())] if reply else [])]
