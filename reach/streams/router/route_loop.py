"""The router's hot path: what it decides for each envelope on the capability topics, on the batch worker.

Reading, decoding nothing it does not need, producing, waiting for acknowledgements, committing, rewinding a
partition whose outputs failed and rebalancing are reach.kafka.worker's (decision 0053); this file says what the
router decides. Per batch (`handle`): decode each envelope once (the payload is never read), decide the batch with
one `reach.core.routing.Decider` (pure; the routing table of reach.streams.router.routetable is kept across
batches), claim the batch's terminal slots in one round trip (reach.terminals), and return the outputs: forwards of
the original bytes, terminal receipts, dead letters, fan-out deliveries. Each forward's ROUTED receipt carries the
inbox offset, so it is a follow-up of the forward computed from its delivery report and produced inside the same
flush (decision 0063; one flush per batch, where decision 0054 had two). The batch window opens only while batches
hold more than one record (REACH_ROUTER_BATCH_WINDOW_MS). A record the broker refuses for good (too large) goes to
`failed`: dead-lettered by reference and REJECTED; a Schema Registry outage holds its partition (read again after a
growing pause); a router bug REJECTS that record only.
"""
from __future__ import annotations

import functools
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from reach import dlq, tracing
from reach.core import allowance, fallback, sessionmap
from reach.core.candidates import RouteRequest
from reach.core.factors import FactorWeights
from reach.core.lifecycle import FallbackRef
from reach.core.loads import MessageKey
from reach.core.routing import (
    Decider,
    Expired,
    Forward,
    NoRoute,
    Overload,
    Reject,
    RouteOutcome,
    Unavailable,
    parse_request,
)
from reach.core.timeouts import stretched
from reach.envelopes import MAX_PAYLOAD_BYTES, now_ms
from reach.errors import ConfigError, InvalidName
from reach.kafka import avrogen, clients, delivery, topics
from reach.kafka import headers as H
from reach.kafka.acks import Position
from reach.kafka.codec import (
    DecodeError,
    RegistryUnavailable,
    UnknownSchema,
    decode_dict,
    default_codec,
    encode_dict,
)
from reach.kafka.types import Consumer, KafkaException
from reach.kafka.worker import Hold, Output, Rebalance, Record, Refused, Subscription, Worker
from reach.names import Names
from reach.records import Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.feed import Feed
from reach.streams.router import affinity
from reach.streams.router.budgets import TenantBudgets, budget_message
from reach.streams.router.captopics import CapabilityTopics
from reach.streams.router.ports import Handoff
from reach.streams.router.qps import QpsLimits
from reach.streams.router.routed_receipt import RoutedReceiptWriter
from reach.streams.router.routetable import RouteTable, RouteTables
from reach.streams.router.state import RouterState, StateLoop
from reach.streams.router.stats import OTHER, RouterStats
from reach.streams.router.subscriptions import FanOutStep, receipt_headers
from reach.terminals import Claimed, Fence, Terminal, fence_from_settings

log = logging.getLogger("reach.router")

COMMIT_EVERY_S = 0.1
"""How often the hot path's commits may go out (reach.core.commits): at most every 100 ms, one in flight, as the
agent's. Safe by construction (decision 0070): a crash reads the uncommitted envelopes again, and each is decided
again: a forward meets the agent's result cache, an ending the first-terminal register (reach.terminals), so a
message still ends once (tests/integration/test_commit_cadence.py kills a router between commits)."""

MAX_ENVELOPE_BYTES = MAX_PAYLOAD_BYTES + 64 * 1024
"""Envelopes above this size are REJECTED (OVERSIZE): the payload limit plus room for the routing fields."""


def router_group(names: Names) -> str:
    """The hot path's consumer group; the faust app itself is group `<ns>.router` (its app id)."""
    return f"{names.router_app_id}.capabilities"


class _Batch:
    """What one consumed batch caused: its outputs, the table and the decisions it routed with."""

    __slots__ = ("decider", "known", "outputs", "routes", "stalled", "table", "terminals", "won")

    def __init__(self, table: RouteTable, decider: Decider) -> None:
        self.outputs: list[Output | Hold] = []
        self.stalled: set[tuple[str, int]] = set()  # partitions held from a record the registry could not decode
        self.table = table  # the per-capability settings, from the views
        self.known = table.known  # capabilities with a live instance: the only ones with their own stats
        self.decider = decider  # the batch's decisions, in order
        self.routes: list[tuple[MessageKey, str]] = []  # (message key, instance) of each forward
        self.terminals: list[_Ending] = []  # terminal receipts waiting for the batch's one claim
        self.won: dict[Position, bytes] = {}  # the receipt each record claimed its slot with

    def stats_key(self, capability: str) -> str:
        """Where the router's counts of a capability go: its own only while a live instance serves it."""
        return capability if capability in self.known else OTHER


@dataclass(frozen=True)
class _Ending:
    """A terminal receipt the router decided, held until the batch claims its slot (reach.terminals); `side` is
    what only the winner produces (the dead letter)."""

    position: Position
    terminal: Terminal
    headers: H.Headers
    capability: str
    counter: str  # the router's count of this outcome, counted only if it wins (else `superseded`)
    side: Callable[[], list[Output]] | None = None
    child: _Child | None = None  # the capability's fallback, sent only if it wins (reach.core.fallback)


@dataclass(frozen=True)
class _Child:
    """A fallback child envelope (encoded) for the capability topic of the fallback."""

    topic: str
    message_id: str
    key: str  # session_key, else message_id (as every capability topic is keyed)
    value: bytes
    mark: str  # the x-reach-fallback header of the parent's ending


class Router(Worker[bytes]):
    """The routing worker: start()/stop() from any thread; several workers share the capability topics."""

    thread_name = "reach-router"
    label = "router"
    restart_on = (KafkaException,)  # a fresh consumer resumes from the last committed offsets
    stop_timeout_s = 15.0
    log = log

    def __init__(
        self,
        *,
        kafka: KafkaSettings,
        reach: ReachSettings,
        batch_size: int = 500,
        batch_window_ms: float | None = None,
        metadata_refresh_ms: int = 2_000,
        rng: random.Random | None = None,
        redis: RedisSettings,
        fence: Fence | None = None,
        handoff: Handoff,
        feed: Feed | None = None,
        budgets: TenantBudgets | None = None,
    ) -> None:
        window = reach.router_batch_window_ms if batch_window_ms is None else batch_window_ms
        super().__init__(kafka=kafka, subscription=Subscription(
            group=router_group(Names(reach.namespace)), topics=(), profile="hot", producer_profile="hot",
            max_records=batch_size, poll_s=0.2, window_ms=max(int(window), 0), window_when_busy=True, flush_s=30.0,
            commit_every_s=COMMIT_EVERY_S,
            consumer_config={"topic.metadata.refresh.interval.ms": metadata_refresh_ms, "session.timeout.ms": 6_000,
                             "heartbeat.interval.ms": 1_500, "partition.assignment.strategy": "roundrobin"},
            producer_config={"message.max.bytes": dead_letter_bytes(reach),
                             "topic.metadata.propagation.max.ms": delivery.PROPAGATION_MS}))
        self.budgets = budgets  # tenants' spend limits (REACH_TENANT_LIMITS); None: none configured
        self.kafka = kafka
        self.settings = reach
        self.names = Names(self.settings.namespace)
        self.fence = fence or fence_from_settings("router", namespace=self.settings.namespace, redis_settings=redis)
        self.state = RouterState()
        self._tables = RouteTables(self.state)
        self.handoff = handoff
        self.stats = RouterStats()
        self.affinity = self.state.sessions  # recovered from the sessions topic by the state loop
        self._sessions_topic: str | None = None  # set once the loop saw the topic exists
        self.qps = QpsLimits()
        self.fanout = FanOutStep(self.names.receipts)  # subscribers: fan-out (decision 0040), notified (0076)
        self._metadata_refresh_ms = metadata_refresh_ms
        self.topics: CapabilityTopics | None = None  # the current loop's subscription (None before it starts)
        self._rng = rng or random.Random()
        self.worker_id = uuid.uuid4().hex[:12]
        self._routed_writer = RoutedReceiptWriter.create()
        self._routed_headers = [(H.ROUTER, self.worker_id.encode())]
        self._max_bytes = int(self.subscription.producer_config["message.max.bytes"])
        self._state_loop = StateLoop(state=self.state, names=self.names, kafka=self.kafka, router_id=self.worker_id,
                                     on_bad_record=lambda: self.stats.count(OTHER, "bad_records"), feed=feed)
        self._batch: _Batch | None = None  # the batch being handled (its won slots serve `failed`)
        self.observe_decision: Callable[[float], object] = lambda _s: None  # the app's decision histogram (0073)
        self._outage_s = 0.0  # how long a partition waits after the registry failed to decode (doubling)

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, *, ready_timeout: float | None = 30.0) -> None:
        """Start the state loop and the hot loop; with a timeout, wait until the registry is loaded."""
        self._state_loop.start()
        super().start()
        if ready_timeout is not None:
            self._state_loop.wait_loaded(ready_timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Finish the current batch, leave the group, close the clients."""
        super().stop(timeout)
        self._state_loop.stop(self.stop_timeout_s if timeout is None else timeout)

    def healthy(self) -> bool:
        # a restart of the hot loop (a fresh consumer after a KafkaException) does not make the router unhealthy:
        # `reach router --no-faust` exits on an unhealthy worker; only a stopped loop or a failing state loop do
        return self.running and self._state_loop.error is None

    # -- the hot loop: what the worker asks of the router -------------------------------------------

    def _loop(self) -> None:
        while not self.state.ready.wait(0.5):  # routes only once the registry and control topics are read
            if self._stop.is_set():
                return
        super()._loop()

    def opened(self) -> None:
        self._sessions_topic = _existing(self.kafka, self.names.sessions)

    def subscribe(self, consumer: Consumer, rebalance: Rebalance) -> None:
        """The capability topics are learned while the router runs (reach.streams.router.captopics): `resubscribe`
        follows them with the worker's rebalance callbacks."""
        self.topics = CapabilityTopics(self.names, self._metadata_refresh_ms / 1000, self.kafka,
                                       group=self.subscription.group,
                                       on_members=lambda n: setattr(self.qps, "workers", n),
                                       on_assigned=rebalance.on_assign, on_revoked=rebalance.on_revoke,
                                       on_lost=rebalance.on_lost,
                                       registered=lambda: self.state.capabilities(now_ms()))
        self.topics.start()

    def resubscribe(self, consumer: Consumer) -> bool:
        return self.topics is not None and self.topics.refresh(consumer)

    def closed(self) -> None:
        if self.topics is not None:
            self.topics.stop()

    def handle(self, records: list[Record[bytes]]) -> list[Output | Hold]:
        """Route a batch: every record's outputs (a held partition's records after the held one are left)."""
        now = now_ms()
        table = self._tables.at(now)
        batch = self._batch = _Batch(table, Decider(
            now_ms=now, loads=self.state.loads.on_demand(table.live_by_id, now_ms=now), disabled=table.disabled,
            health=self.state.health, canaries=table.canaries, costs=self.state.costs.means, rng=self._rng))
        for record in records:
            tp = (record.topic, record.partition)
            if tp in batch.stalled:
                continue  # read again from the held record, in order
            value = record.raw
            if value is None:
                continue  # a tombstone on a capability topic carries no request
            try:
                self._route_one(record, value, batch, now=now)
            except RegistryUnavailable as exc:  # infrastructure: not this record's fault, read it again later
                self._outage_s = min(max(self._outage_s * 2, 0.2), 5.0)
                log.warning("%s: schema registry unavailable, reading %s[%d] again in %.1fs: %s", record,
                            *tp, self._outage_s, exc)
                batch.outputs.append(Hold(record.position, self._outage_s))
                batch.stalled.add(tp)
            except Exception as exc:  # noqa: BLE001 - a router bug must not block the partition
                log.exception("routing %s[%d]@%d failed", *record.position)
                self._reject(record, value, None, Reject("ROUTER_ERROR", repr(exc)), batch, now)
        if not batch.stalled:
            self._outage_s = 0.0
        if batch.routes:
            self.state.loads.routed_many(batch.routes, now)  # the next batch's view counts them queued
        self._settle_terminals(batch)
        return batch.outputs

    def failed(self, record: Record[bytes], error: BaseException) -> list[Output]:
        """A record whose outputs the broker refused for good (too large for a topic, topic gone): dead-lettered by
        reference and REJECTED, so it never holds its partition; its first ending keeps its slot (`won`)."""
        now = now_ms()
        previous = self._batch
        batch = _Batch(previous.table, previous.decider) if previous is not None else _Batch(
            self._tables.at(now), Decider(now_ms=now, loads=self.state.loads.view((), now_ms=now)))
        if previous is not None:
            batch.won = previous.won
        value = record.raw or b""
        if isinstance(error, Refused):
            why = delivery.describe(error.errors[0]) if error.errors else str(error)
            reject = Reject("REFUSED_BY_BROKER", f"the broker refused a record this envelope caused: {why}")
        else:
            reject = Reject("ROUTER_ERROR", repr(error))
        self._reject(record, value, _decoded(value), reject, batch, now, by_reference=isinstance(error, Refused))
        self._settle_terminals(batch)
        return [o for o in batch.outputs if isinstance(o, Output)]

    def _session(self, session_key: str | None, instance_id: str, now: int, *, tenant: str) -> None | Output:
        """Where a session sticks, on the compacted sessions topic (reach.core.sessionmap): untracked, since a lost
        record costs affinity, never a message."""
        if self._sessions_topic is None or not session_key:
            return None
        snapshot, snapshot_at = self.affinity.snapshot(session_key, now)  # kept by compaction: it goes along
        return Output(self._sessions_topic, sessionmap.encode(instance_id, now, tenant, snapshot=snapshot,
                                                              snapshot_at=snapshot_at),
                      key=session_key.encode(), tracked=False)

    def _carried_session(self, envelope: dict[str, Any], session: str | None, now: int) -> dict[str, Any]:
        """The envelope's change that carries its session's snapshot ({} when there is none, or it carries it
        already): the newest snapshot the session's handlers wrote back (`ctx.session`, docs/decisions/0076),
        whichever instance the request goes to; it replaces a snapshot the caller sent."""
        if not session:
            return {}
        snapshot, _at = self.affinity.snapshot(session, now)
        if snapshot is None or envelope.get("session_snapshot") == snapshot:
            return {}
        return {"session_snapshot": snapshot}

    def _route_one(self, msg: Record[bytes], value: bytes, batch: _Batch, *, now: int) -> None:
        position = msg.position
        try:
            envelope = avrogen.decode_dict("Envelope", value)  # generated from Envelope.avsc (decision 0063)
        except DecodeError as exc:
            code = "UNKNOWN_SCHEMA" if isinstance(exc, UnknownSchema) else "UNDECODABLE"
            self._reject(msg, value, None, Reject(code, str(exc)), batch, now)
            return
        if envelope.get("reply_to"):
            try:
                self.names.check_reply_to(envelope["reply_to"])
            except InvalidName as exc:  # never write where an untrusted envelope asks, except a reply topic
                self._reject(msg, value, envelope, Reject("BAD_REPLY_TO", str(exc)), batch, now)
                return
        parsed = parse_request(envelope)
        if isinstance(parsed, Reject):
            self._reject(msg, value, envelope, parsed, batch, now)
            return
        request = parsed
        if len(value) > MAX_ENVELOPE_BYTES:
            reject = Reject("OVERSIZE", f"envelope is {len(value):,} bytes; the limit is {MAX_ENVELOPE_BYTES:,}")
            self._reject(msg, value, envelope, reject, batch, now)
            return
        reply = self._reply_header(envelope) + receipt_headers(envelope)
        over = self.budgets.exceeded(request.tenant, now) if self.budgets is not None else None
        if over is not None:  # the tenant's spend limit is reached: not routed until its period resets
            receipt = _receipt(request, Status.FAILED, now, retry_after_ms=max(0, over.reset_at_ms - now),
                               error=_error("BUDGET", "BUDGET_EXCEEDED", budget_message(request.tenant, over)))
            self._produce_terminal(batch, position, receipt, reply, counter="budget_exceeded")
            return
        drained = allowance.exhausted(envelope)
        if drained is not None:  # a child whose chain spent its budget (reach.core.allowance, 0043)
            receipt = _receipt(request, Status.FAILED, now, error=_error("BUDGET", "BUDGET_EXCEEDED", drained))
            self._produce_terminal(batch, position, receipt, reply, counter="budget_exceeded")
            return
        weights, validate = batch.table.settings_of(self.state, request.capability)
        plan = self.fanout.plan(envelope, batch.table.by_capability.get(request.capability, ()),
                                 batch.table.splits)
        if plan.agents:  # an event on a subscribe capability: one delivery per subscribing agent
            batch.outputs += self.fanout.send(position, topic=msg.topic, envelope=envelope, request=request,
                                              agents=plan.agents, reply=reply, now=now)
            self.stats.count(batch.stats_key(request.capability), "fanned_out")
            return
        session = sessionmap.scoped(request.tenant, request.session_key)  # a session is its tenant's
        sticky = affinity.sticky(self.affinity, session, envelope.get("headers"), now)
        candidates = plan.candidates
        clock = time.monotonic()
        outcome: RouteOutcome = batch.decider.decide(
            request,
            candidates,
            weights=weights,
            affinity={request.session_key: sticky} if request.session_key and sticky else None,
            payload=envelope["payload"] if validate else None,
            throttled=self.qps.throttled(candidates, clock),
            queue_when_full=plan.delivery,  # a subscriber's deliveries queue in its inbox, never shed
        )
        self.observe_decision(time.monotonic() - clock)
        stats_key = batch.stats_key(request.capability)
        if isinstance(outcome, Forward):
            instance = outcome.instance
            asked = envelope["execution_timeout_ms"]
            changes = self._carried_session(envelope, session, now)  # the snapshot its handlers wrote back
            if outcome.timeout_factor > 1 and asked > 0:  # rare: a slow sole candidate; others keep the bytes
                changes["execution_timeout_ms"] = stretched(asked, outcome.timeout_factor)
            if changes:
                value = encode_dict("Envelope", {**envelope, **changes})
            self.qps.take(instance, clock)
            batch.outputs.append(Output(outcome.topic, value, key=msg.key,
                                        headers=tracing.routed(msg, envelope, outcome, since=clock),
                                        partition=outcome.partition, cause=position,
                                        then=functools.partial(self._routed, position, request, outcome, reply)))
            batch.routes.append(((request.message_id, request.generation, request.attempt), instance.instance_id))
            if plan.observers:  # subscribers beside the handlers: notified (docs/decisions/0076)
                batch.outputs += self.fanout.notify(position, topic=msg.topic, envelope=envelope,
                                                    agents=plan.observers)
            if self.affinity.set(session, instance.instance_id, now):
                record = self._session(session, instance.instance_id, now, tenant=request.tenant)
                if record is not None:
                    batch.outputs.append(record)
            self.stats.count(stats_key, "routed")
        elif isinstance(outcome, Overload):
            receipt = _receipt(request, Status.FAILED, now, error=_error("OVERLOAD", "OVERLOAD", outcome.message),
                               retry_after_ms=outcome.retry_after_ms,
                               decision={"candidates": [s.as_dict() for s in outcome.scores],
                                         "weights": _weights(outcome.weights)})
            self._produce_terminal(batch, position, receipt, reply, counter="overload",
                                   child=self._fallback(envelope, now))
        elif isinstance(outcome, Unavailable):
            receipt = _receipt(request, Status.FAILED, now,
                               error=_error("UNAVAILABLE", "UNAVAILABLE", outcome.message),
                               retry_after_ms=outcome.retry_after_ms)
            self._produce_terminal(batch, position, receipt, reply, counter="unavailable",
                                   child=self._fallback(envelope, now))
        elif (isinstance(outcome, NoRoute) and self.handoff.enabled
              and self.state.control.policy(request.capability).handoff):
            for topic, key, out, headers in self.handoff.outputs(envelope, value, candidates, why=outcome.message,
                                                                 disabled=batch.table.disabled, names=self.names,
                                                                 at=now):
                batch.outputs.append(Output(topic, out, key=key, headers=headers, cause=position))
            self.stats.count(stats_key, "handed_off")  # a human answers it (docs/intent.md), not UNROUTABLE
        elif isinstance(outcome, NoRoute):
            letter = None
            if outcome.dead_letter:
                letter = functools.partial(self._dead_letter, msg, value, envelope, "NO_ROUTE",
                                           _error("NO_ROUTE", "NO_ROUTE", outcome.message), now)
                status, counter = Status.DEAD_LETTERED, "dead_lettered"
            else:
                status, counter = Status.UNROUTABLE, "unroutable"
            receipt = _receipt(request, status, now, error=_error("NO_ROUTE", "NO_ROUTE", outcome.message))
            self._produce_terminal(batch, position, receipt, reply, counter=counter, side=letter,
                                   child=self._fallback(envelope, now))
        elif isinstance(outcome, Expired):
            receipt = _receipt(request, Status.EXPIRED, now, error=_error("TIMEOUT", "BUDGET_SPENT", outcome.message))
            self._produce_terminal(batch, position, receipt, reply, counter="expired")
        else:
            self._reject(msg, value, envelope, outcome, batch, now)

    # -- records -------------------------------------------------------------------------------------

    @staticmethod
    def _reply_header(envelope: dict[str, Any] | None) -> H.Headers:
        """The x-reach-reply-to header for this envelope's receipts: the status fold sends the reply."""
        reply_to = (envelope or {}).get("reply_to")
        return [(H.REPLY_TO, reply_to.encode())] if reply_to else []

    def _produce_receipt(self, batch: _Batch, position: Position, receipt: dict[str, Any],
                         reply: H.Headers | None = None) -> None:
        key = receipt["message_id"].encode()
        batch.outputs.append(Output(self.names.receipts, encode_dict("Receipt", receipt), key=key,
                                    headers=[(H.MESSAGE_ID, key), *(reply or ())], cause=position))

    def _produce_terminal(self, batch: _Batch, position: Position, receipt: dict[str, Any],
                          reply: H.Headers | None = None, *, counter: str,
                          side: Callable[[], list[Output]] | None = None, child: _Child | None = None) -> None:
        """Hold a terminal receipt (and its side output, its fallback child) for the batch's one claim of the
        terminal slots."""
        terminal = Terminal(receipt["message_id"], receipt.get("generation") or 0, encode_dict("Receipt", receipt))
        batch.terminals.append(_Ending(position, terminal, list(reply or ()), batch.stats_key(receipt["capability"]),
                                       counter, side, child))

    def _fallback(self, envelope: dict[str, Any], now: int) -> _Child | None:
        """The child the capability's POLICY fallback gets for this ending (docs/decisions/0034), or None: no
        fallback, the chain is at its depth, the budget is spent, or the fallback has no topic yet."""
        capability = self.state.control.policy(envelope["capability"]).fallback
        if not capability:
            return None
        made = fallback.child(envelope, fallback=capability, now=now)
        if isinstance(made, fallback.NotSent):
            log.info("no fallback for %s: %s", envelope["message_id"], made.reason)
            return None
        topic = self.names.capability(capability)
        if self.topics is None or topic not in self.topics.subscribed:
            log.warning("no fallback for %s: topic %s does not exist (start an agent of %s)", envelope["message_id"],
                        topic, capability)
            return None
        ref = FallbackRef(capability=capability, message_id=made["message_id"])
        return _Child(topic, made["message_id"], fallback.key_of(made), encode_dict("Envelope", made),
                      fallback.mark(ref))

    def _settle_terminals(self, batch: _Batch) -> None:
        """First terminal wins (reach.terminals): one round trip claims every held terminal of the batch. A winner
        produces its side output and its receipt; a loser republishes the winner's receipt and nothing else (no
        dead letter for a message an agent already COMPLETED). A winner that is the router's own earlier ending of
        the record (a re-read after its outputs failed) counts as won: its letter again, the stored receipt.
        Redis out: each produces its own (availability)."""
        endings, batch.terminals = batch.terminals, []
        if not endings:
            return
        unfenced = self.fence.unfenced
        # A record whose first ending this batch already claimed (its letter then refused for good) keeps the slot:
        # that receipt again (it may have landed already), and the new ending's side output (the letter by reference)
        settled = {e.position for e in endings if e.position in batch.won}  # counted when they first won
        claims = self.fence.claim_once([(e.position, e.terminal) for e in endings], batch.won)
        for ending, maybe in zip(endings, claims, strict=True):
            claim = cast(Claimed, maybe)  # every router ending has a terminal
            marks: H.Headers = []
            if claim.won:
                if ending.position not in settled:
                    self.stats.count(ending.capability, ending.counter)
                if ending.side is not None:
                    batch.outputs += ending.side()
                if ending.child is not None:  # a derived id: sent again on a re-read, it is the same message
                    child = ending.child
                    batch.outputs.append(Output(child.topic, child.value, key=child.key.encode(),
                                                headers=[(H.MESSAGE_ID, child.message_id.encode())],
                                                cause=ending.position))
                    marks = [(H.FALLBACK, child.mark.encode())]
            else:
                self.stats.count(ending.capability, "superseded")
            key = ending.terminal.message_id.encode()
            batch.outputs.append(Output(self.names.receipts, claim.receipt, key=key,
                                        headers=[(H.MESSAGE_ID, key), *ending.headers, *marks], cause=ending.position))
        if self.fence.unfenced > unfenced:
            self.stats.count(OTHER, "unfenced", self.fence.unfenced - unfenced)

    def _routed(self, position: Position, request: RouteRequest, forward: Forward, reply: H.Headers, partition: int,
                offset: int) -> list[Output]:
        """A forward's follow-up, from its delivery report: the ROUTED receipt naming the inbox offset it landed at,
        tagged with this worker's id so its own state loop need not decode it again."""
        writer = self._routed_writer
        if writer is not None and default_codec().pinned("Receipt"):  # REACH_RECORDS_WRITE_AS: the codec writes them
            writer = None
        if writer is None:
            value = encode_dict("Receipt", self._routed_receipt(request, forward, partition, offset))
        else:
            decision, instance = forward.decision, forward.instance
            value = writer.encode(
                message_id=request.message_id, generation=request.generation, trace_id=request.trace_id,
                tenant=request.tenant, capability=request.capability, attempt=request.attempt, at=now_ms(),
                deadline=request.deadline,
                delivery_timeout_ms=forward.delivery_timeout_ms or request.delivery_timeout_ms,
                reroutes=request.reroutes, agent_id=instance.agent_id, instance_id=instance.instance_id,
                scores=decision.scores, picked_instance=decision.picked_instance, topic=forward.topic,
                partition=partition, offset=offset, weights=decision.weights, arm=decision.arm,
                admission=forward.admission, callback=request.callback,
            )
        key = request.message_id.encode()
        return [Output(self.names.receipts, value, key=key, headers=[(H.MESSAGE_ID, key), *self._routed_headers,
                                                                     *reply], cause=position)]

    def _routed_receipt(self, request: RouteRequest, forward: Forward, partition: int | None,
                        offset: int | None) -> dict[str, Any]:
        decision = forward.decision
        receipt = _receipt(
            request,
            Status.ROUTED,
            now_ms(),
            agent_id=forward.instance.agent_id,
            instance_id=forward.instance.instance_id,
            decision={
                "candidates": [s.as_dict() for s in decision.scores],
                "picked_instance": decision.picked_instance,
                "topic": forward.topic,
                "partition": partition,
                "offset": offset,
                "weights": decision.weights_dict(),
                "arm": decision.arm,
                "admission": forward.admission,
            },
        )
        # queued behind a full instance (reach.core.backlog): the wait in its queue is no late delivery
        receipt["delivery_timeout_ms"] = forward.delivery_timeout_ms or request.delivery_timeout_ms
        return receipt

    def _reject(self, msg: Record[bytes], value: bytes, envelope: dict[str, Any] | None, reject: Reject,
                batch: _Batch, now: int, *, by_reference: bool = False) -> None:
        position = msg.position
        error = _error("INVALID_INPUT", reject.code, reject.message)
        letter = functools.partial(self._dead_letter, msg, value, envelope, reject.code, error, now,
                                   by_reference=by_reference)
        reply = self._reply_header(envelope) if reject.code != "BAD_REPLY_TO" else None
        if envelope is not None:
            request = RouteRequest.from_envelope(envelope)
            receipt = _receipt(request, Status.REJECTED, now, error=error)
            self._produce_terminal(batch, position, receipt, reply, counter="rejected", side=letter)
            return
        message_id = _fallback_id(msg)
        if self._ended_before(message_id, msg, reject, batch):
            return
        batch.outputs += letter()  # undecodable: no (message_id, generation) to fence; nothing else can end it
        receipt = {
            "message_id": message_id,
            "trace_id": "",
            "tenant": "",
            "capability": self._capability_of(msg.topic),
            "status": Status.REJECTED.value,
            "at": now,
            "error": error,
        }
        self._produce_receipt(batch, position, receipt, reply)
        self.stats.count(batch.stats_key(receipt["capability"]), "rejected")

    def _ended_before(self, message_id: str, msg: Record[bytes], reject: Reject, batch: _Batch) -> bool:
        """Whether an envelope this router cannot decode (a newer writer's schema, a corrupt body) names a message
        that already ended (its first terminal, generation 0, in the register): then it is not ended again, neither
        REJECTED nor dead-lettered, only counted (`superseded`) and logged; a message a newer router completed is
        not ended a second time by an older one re-reading its topic (docs/decisions/0048). Redis out: False."""
        winner = self.fence.peek([(message_id, 0)])[0]
        if winner is None:
            return False
        capability = self._capability_of(msg.topic)
        log.warning("%s[%d]@%d: envelope of %s does not decode (%s) but the message already ended; not ended again",
                    *msg.position, message_id, reject.code)
        self.stats.count(batch.stats_key(capability), "superseded")
        return True

    def _dead_letter(self, msg: Record[bytes], value: bytes, envelope: dict[str, Any] | None, reason: str,
                     error: dict[str, str], now: int, *, by_reference: bool = False) -> list[Output]:
        """The original bytes untouched plus provenance; only when even the sized dlq cannot take them, a letter
        by reference (empty envelope: replay reads the origin offset while the origin topic retains it)."""
        topic, partition, offset = position = msg.position
        message_id = envelope.get("message_id") if envelope else None
        record = {
            "envelope": b"" if by_reference else value,
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
        encoded = encode_dict("DeadLetter", record)
        if len(encoded) + _HEADROOM > self._max_bytes and not by_reference:
            note = f"; the {len(value):,}-byte original is not copied (over the dlq limit): replay reads it from origin"
            record = {**record, "envelope": b"", "error": {**error, "message": error["message"] + note}}
            encoded = encode_dict("DeadLetter", record)
        return [Output(self.names.dlq, encoded, key=(message_id or _fallback_id(msg)).encode(),
                       headers=dlq.provenance(topic, partition, offset, reason, message_id), cause=position)]

    def _capability_of(self, topic: str) -> str:
        prefix = self.names.capability_prefix
        return topic[len(prefix):] if topic.startswith(prefix) else topic


_HEADROOM = 1024  # record overhead and provenance headers beyond the encoded value


def dead_letter_bytes(settings: ReachSettings) -> int:
    """message.max.bytes for the router's producer: the dlq's limit from topics.yaml (the largest letter)."""
    try:
        return topics.load(settings.topics_file).dead_letter_bytes()
    except ConfigError as exc:
        log.warning("%s; sizing dead letters for the shipped limit %d", exc, topics.DEAD_LETTER_BYTES)
        return topics.DEAD_LETTER_BYTES


def _decoded(value: bytes | None) -> dict[str, Any] | None:
    try:
        return decode_dict("Envelope", value) if value else None
    except Exception:  # noqa: BLE001 - only used to label a record that is being dead-lettered anyway
        return None


def _fallback_id(msg: Record[bytes]) -> str:
    """A message id for an undecodable record: its x-reach-message-id header, its key, else its position."""
    found = H.text(msg.headers, H.MESSAGE_ID)
    if found:
        return found
    if msg.key:
        return msg.key.decode(errors="replace")
    topic, partition, offset = msg.position
    return f"{topic}/{partition}/{offset}"


def _error(kind: str, code: str, message: str) -> dict[str, str]:
    return {"kind": kind, "code": code, "message": message}


def _weights(weights: FactorWeights) -> dict[str, float]:
    """The Decision.weights map: every factor's weight (reach.core.factors)."""
    return dict(weights)


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
        "callback": request.callback,
        **fields,
    }


def _existing(kafka: KafkaSettings, topic: str) -> str | None:
    """`topic` when the cluster has it (a namespace from before the sessions topic has not), else None."""
    try:
        admin = clients.admin(kafka, **{"allow.auto.create.topics": False})  # a lookup never creates it
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
    except KafkaException:
        return None
    if meta is None or meta.error is not None or not meta.partitions:
        log.warning("%s does not exist: session affinity is not recovered after a router restart; run "
                    "`reach topics apply`", topic)
        return None
    return topic
