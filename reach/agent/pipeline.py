"""One message through the SDK: validate, dedupe by lease, the handler (STARTED past a grace), outcome receipt."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind

from reach import lineage, tracing
from reach.agent import declared, outcomes, session
from reach.agent.agent import Agent, CapabilitySpec, Context
from reach.agent.contract import violation
from reach.agent.ending import Unfenced, claim_ending, publish_ending, publish_in_order
from reach.agent.idempotency import DEFAULT_IDEMPOTENCY_WINDOW_MS, Claim, KeyScope, LeaseStore
from reach.agent.keyledger import KeyLedger
from reach.agent.memorymark import Memory
from reach.agent.middleware import Finished, Middleware
from reach.agent.outage import Outage
from reach.agent.outcomes import Outcome, Verdict
from reach.agent.policy import execution_timeout_ms
from reach.agent.publisher import Sender
from reach.agent.recentruns import Found, Ran, RecentRuns
from reach.agent.redisguard import redis_call
from reach.agent.runtimer import RunTimer, until_due
from reach.agent.signals import NeedsInput
from reach.agent.startgate import STARTED_AT, Graces, StartGate
from reach.agent.statuscheck import AlreadyCompleted
from reach.agent.streaming import ProgressStream
from reach.core.allowance import Spent, as_timings
from reach.core.progress import INTERVAL_MS as PROGRESS_INTERVAL_MS
from reach.core.progress import Coalescer
from reach.core.retention import began_after, key_may_be_forgotten, may_be_forgotten
from reach.core.timeouts import RunClock, timeout_problem
from reach.core.turns import conversation, dropped_turns
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.failures import Outgoing
from reach.kafka import codec
from reach.kafka import headers as h
from reach.kafka.receiptbytes import encode_receipt
from reach.kafka.types import KafkaException, Message
from reach.receipts import receipt_for, started_bytes
from reach.records import Envelope, ErrorInfo, InputRequest, Policy, Receipt, Status, StepStatus, Usage

log = logging.getLogger("reach.agent")
LEASE_POLL_S = 0.25
# librdkafka refuses records over message.max.bytes (default 1,000,000); leave room for key, headers, framing.
MAX_RECEIPT_BYTES = 1_000_000 - 64 * 1024
T = TypeVar("T")
Completed = Callable[[str, int], Awaitable[AlreadyCompleted | None]]
KEY_BUSY_RETRY_MS = 1_000
TRACING_RECHECK_S = 1.0  # a key still running after this attempt's wait: try again after this long


async def _unknown(_message_id: str, _generation: int) -> AlreadyCompleted | None:
    return None


async def _always(_partition: int) -> bool:
    return True


@dataclass(frozen=True)
class Processed:
    """How a message ended, and the acks of its last records: its offset may be committed once all succeeded.

    outcome None: not run here, because this instance no longer owns the record's partition (its next owner runs
    it; nothing was published)."""

    outcome: Outcome | None
    acks: tuple[Future[Message], ...] = ()


class Pipeline:
    """Runs on the SDK's event loop; `process` returns the acks it did not wait for (the caller checks them).

    Redis is a cache of leases and results: when it fails, the pipeline backs off from it, asks its own record of
    recent runs (reach.agent.recentruns) and then `completed` (the status table) whether the message already ended,
    and otherwise runs the handler (at least once)."""

    def __init__(self, agent: Agent, *, publisher: Sender, leases: LeaseStore, receipts_topic: str,
                 executor: Executor, middleware: list[Middleware], completed: Completed = _unknown,
                 redis_outage: Outage | None = None,
                 policy: Callable[[str], Policy | None] = lambda _: None,
                 cancelled: Callable[[str, str], bool] = lambda _id, _tenant: False,
                 admitted: Callable[[int], Awaitable[bool]] = _always,
                 progress_interval_ms: int = PROGRESS_INTERVAL_MS, currency: str | None = None,
                 memory: Memory | None = None, ledger: KeyLedger | None = None,
                 runs: RecentRuns | None = None, unfenced: Unfenced | None = None,
                 sessions_topic: str | None = None) -> None:
        self._sessions_topic = sessions_topic  # where a snapshot written back through ctx.session goes
        # endings published while Redis was out, claimed once it answers (share the RetryStep's: one backlog)
        self._unfenced = unfenced if unfenced is not None else Unfenced()
        # the runs this instance finished or is running: a redelivery never reruns them, Redis or not
        self._runs = runs if runs is not None else RecentRuns(max_runs=agent.recent_runs)
        self._memory = memory  # when Redis's memory began (a Redis that came back empty starts it again)
        self._ledger = ledger  # business keys' COMPLETED results on Kafka, asked while Redis's memory is young
        self._agent = agent
        self._currency = currency  # REACH_CURRENCY: what the usage a handler reports costs in
        self._progress_interval_ms = progress_interval_ms
        self._admitted = admitted  # reach.agent.ownership: may a handler still start for this partition?
        self._cancelled = cancelled
        self._policy = policy
        self._middleware = middleware
        self._publisher = publisher
        self._leases = leases
        self._topic = receipts_topic
        self._executor = executor
        self._completed = completed
        self._outage = redis_outage or Outage()
        self._lock = threading.Lock()
        self._lingering = 0
        self._recording, self._tracing_at = False, -TRACING_RECHECK_S
        self._graces = Graces(agent.started_grace_ms / 1000)  # one loop timer for every run's grace
        self._renewals = Renewals()  # and one per lease length for every run's renewals

    def _tracing(self) -> bool:
        """Whether spans are recorded (reach.tracing.recording), asked at most once a second: an SDK is installed
        at start, and asking reads the environment."""
        now = time.monotonic()
        if now - self._tracing_at >= TRACING_RECHECK_S:
            self._recording, self._tracing_at = tracing.recording(), now
        return self._recording

    @property
    def lingering(self) -> int:
        """Sync handlers past their timeout whose threads still run (they hold a pool thread and their lease)."""
        return self._lingering

    async def process(self, envelope: Envelope, headers: list[tuple[str, bytes]], *, raw: bytes | None = None,
                      origin: tuple[str, int, int] | None = None) -> Processed:
        """Handle one envelope at least once, and in effect once per (message_id, generation)."""
        ctx = tracing.extract(headers, envelope)
        if not self._tracing():  # no SDK: a no-op span is its parent's context, so that context is enough
            token = otel_context.attach(ctx)
            try:
                return await self._process(envelope, raw, origin)
            finally:
                otel_context.detach(token)
        with tracing.tracer().start_as_current_span(
            f"reach.handle {envelope.capability}", context=ctx, kind=SpanKind.CONSUMER,
            attributes=tracing.delivery_attributes(envelope, origin), links=tracing.created_by(headers),
        ):
            return await self._process(envelope, raw, origin)

    async def _process(self, envelope: Envelope, raw: bytes | None,
                       origin: tuple[str, int, int] | None) -> Processed:
        spec = self._agent.match(envelope)
        if spec is None:
            verdict = outcomes.rejected("NO_MATCHING_CAPABILITY", (
                f"{self._agent.agent_id} does not serve {envelope.capability}@{envelope.capability_version}; "
                f"it serves {', '.join(f'{n}@{c.record.version}' for n, c in self._agent.capabilities.items())}"))
            return await self._finish(envelope, verdict, [])
        problem = timeout_problem(envelope.execution_timeout_ms, what="the envelope's execution_timeout_ms")
        if problem is not None:  # a negative or absurd ask: refused, never run with a timeout nobody meant
            return await self._finish(envelope, outcomes.rejected("BAD_TIMEOUT", problem), [])
        mismatch = declared.contract_problem(envelope, spec)  # its schema_version: a contract served here?
        if mismatch is not None:
            return await self._finish(envelope, mismatch, [])
        payload, bad = _payload(envelope, spec)
        if bad is not None:
            return await self._finish(envelope, bad, [])
        return await self._claimed(envelope, spec, payload, raw, origin)

    async def _claimed(self, envelope: Envelope, spec: CapabilitySpec, payload: Any, raw: bytes | None,
                       origin: tuple[str, int, int] | None) -> Processed:
        mid, gen = envelope.message_id, envelope.generation
        policy = self._policy(envelope.capability)  # once per message: the run reads the same one
        timeout_ms = execution_timeout_ms(envelope.execution_timeout_ms, policy, self._agent.execution_timeout_ms)
        lease_ms = timeout_ms + self._agent.lease_margin_ms
        now = now_ms()
        scope = key_scope(envelope, policy, lease_ms=lease_ms, now=now, key=declared.request_key(envelope, spec))
        waited_until = now + timeout_ms  # how long this attempt waits for another message running its key
        if self._unfenced:  # Redis was out: claim what went out unfenced first (reach.agent.ending)
            await self._unfenced.settle(self._outage, self._leases)
        while True:
            if origin is not None and not await self._admitted(origin[1]):
                return Processed(None)
            claim = await self._redis(lambda: self._leases.claim(mid, gen, envelope.attempt, lease_ms, scope))
            if claim is None:  # Redis is unreachable: the status table (and the key ledger) is the durable check
                if self._memory is not None:
                    self._memory.forget()  # it may come back empty: read its mark again then
                outage_since = now_ms() // 60_000 * 60_000  # the ledger is read again at most once a minute
                found = self._runs.find(mid, gen)  # ran here: no status table round trip (it may lag the receipts)
                return (await self._ran_here(envelope, found)
                        or await self._status_completed(envelope)
                        or await self._ledger_reused(envelope, scope, outage_since, claimed=False)
                        or await self._started(envelope, spec, payload, raw, origin, timeout_ms, scope, policy))
            if claim.ours:
                since = await self._memory_since()
                if (may_be_forgotten(created_at_ms=envelope.created_at, now_ms=now_ms(),
                                     ttl_s=self._agent.result_ttl_s)
                        or began_after(created_at_ms=envelope.created_at, memory_since_ms=since)):
                    # old enough that its register may have expired, or created before Redis's memory began
                    # (reach.core.retention): ask the status table
                    done = await self._status_completed(envelope)
                    if done is not None:
                        await self._redis(lambda: self._leases.release(mid, gen))
                        return done
                if since is not None and scope is not None and key_may_be_forgotten(
                        now_ms=now_ms(), window_ms=scope.window_ms, memory_since_ms=since):
                    reused = await self._ledger_reused(envelope, scope, since, claimed=True)
                    if reused is not None:
                        return reused
                break
            if claim.result is not None or claim.retry is not None:
                return await self._republish(envelope, claim)
            if claim.reused is not None:
                return await self._reuse(envelope, claim.reused)
            if claim.key_holder is not None and now_ms() >= waited_until:
                return await self._finish(envelope, outcomes.Verdict(Outcome.RETRY, error=ErrorInfo(
                    kind="TRANSIENT", code="IDEMPOTENCY_KEY_BUSY",
                    message=f"{claim.key_holder} with the same idempotency_key is still running; trying again"),
                    retry_after_ms=KEY_BUSY_RETRY_MS), [], raw=raw, origin=origin)
            # Another run holds the lease (or the business key): never run concurrently; wait until it finishes.
            await asyncio.sleep(LEASE_POLL_S)
        return await self._started(envelope, spec, payload, raw, origin, timeout_ms, scope, policy)

    async def _memory_since(self) -> int | None:
        if self._memory is None:
            return None
        known = self._memory.known()  # read at most once a second: no Redis call (nor coroutine) in between
        return known if known is not None else await self._redis(self._memory.since)

    async def _ledger_reused(self, envelope: Envelope, scope: KeyScope | None, since: int, *,
                             claimed: bool) -> Processed | None:
        """The first COMPLETED result of the envelope's business key from the key ledger on Kafka (Redis forgot
        it, or is out), reused; None when the key has none there (or the ledger cannot answer: run it, at least
        once). `claimed`: the lease and the key are ours in Redis, so the key gets its result back and the
        lease is given up."""
        if scope is None or self._ledger is None:
            return None
        ledger = self._ledger
        try:
            first = await ledger.completed(scope, now_ms=now_ms(), memory_since_ms=since)
        except (ReachError, KafkaException) as exc:
            log.warning("the key ledger cannot answer for %s (%s); running it", envelope.message_id, exc)
            return None
        if first is None:
            return None
        log.info("%s: its idempotency_key's first result comes from the key ledger (Redis had forgotten it)",
                 envelope.message_id)
        if claimed:
            await self._redis(lambda: self._leases.restore_key(envelope.message_id, scope, first))
            await self._redis(lambda: self._leases.release(envelope.message_id, envelope.generation))
        return await self._reuse(envelope, first)

    async def _status_completed(self, envelope: Envelope) -> Processed | None:
        """COMPLETED again from the status table's row when it says the message completed, else None."""
        done = await self._completed(envelope.message_id, envelope.generation)
        if done is None:
            return None
        log.info("%s already COMPLETED (status table); not running it again", envelope.message_id)
        again = receipt_for(envelope, Status.COMPLETED, agent_id=self._agent.agent_id,
                            instance_id=self._agent.instance_id, step_status=StepStatus.OK,
                            result=done.result, timings={"status_hit": 1})
        return Processed(Outcome.COMPLETE, (self._send(again),))

    async def _started(self, envelope: Envelope, spec: CapabilitySpec, payload: Any, raw: bytes | None,
                       origin: tuple[str, int, int] | None, timeout_ms: int, scope: KeyScope | None,
                       policy: Policy | None) -> Processed:
        """Run the handler of a claimed message (ours, or Redis is out): STARTED, the run, its outcome."""
        mid, gen = envelope.message_id, envelope.generation
        if origin is not None and not await self._admitted(origin[1]):
            # the claim's answer may have waited out a freeze that cost the partition: its next owner runs it
            await self._redis(lambda: self._leases.release(mid, gen))
            return Processed(None)
        found = self._runs.begin(mid, gen, envelope.attempt)
        if found is not None:  # finished or running here (Redis is out, or forgot it): never run it twice
            return await self._ran_here(envelope, found, release=True) or await self._started(
                envelope, spec, payload, raw, origin, timeout_ms, scope, policy)  # it was abandoned: run it
        try:
            return await self._run_started(envelope, spec, payload, raw, origin, timeout_ms, scope, policy)
        finally:
            self._runs.abandon(mid, gen)  # no-op once its outcome was recorded (reach.agent.recentruns)

    async def _ran_here(self, envelope: Envelope, found: Found | None, *, release: bool = False) -> Processed | None:
        """A delivery of a run this instance finished or is running (waited for): its terminal re-sent through the
        first-terminal register (one ending is kept), or nothing again for an attempt whose retry or question was
        published and acknowledged; None when it ran nowhere here (or was abandoned)."""
        mid, gen = envelope.message_id, envelope.generation
        if found is not None and not isinstance(found, Ran):
            log.info("%s is running on this instance; this delivery waits for its outcome", mid)
            found = await found.wait()
        if found is None or (found.ending is None and envelope.attempt > found.attempt):
            return None
        if found.ending is None:
            log.info("%s attempt %d already ended here (%s); not running it again", mid, envelope.attempt,
                     found.outcome.name)
            if release:
                await self._redis(lambda: self._leases.release(mid, gen))
            return Processed(found.outcome)
        log.info("%s already ended on this instance; its terminal receipt is sent again, the handler not run", mid)
        ended = await claim_ending(self._outage, self._leases, mid, gen, found.ending,  # drops our lease too
                                   unfenced=self._unfenced)
        return Processed(_outcome(codec.decode(ended, Receipt).status), (self._send_raw(mid, ended),))

    async def _run_started(self, envelope: Envelope, spec: CapabilitySpec, payload: Any, raw: bytes | None,
                           origin: tuple[str, int, int] | None, timeout_ms: int,
                           scope: KeyScope | None, policy: Policy | None) -> Processed:
        mid, gen = envelope.message_id, envelope.generation
        lease_ms = timeout_ms + self._agent.lease_margin_ms
        if self._cancelled(mid, envelope.tenant):  # not started: skipped, its handler never runs
            return await self._finish(envelope, outcomes.canceled("the caller cancelled it before it started"), [],
                                      release=True, raw=raw, origin=origin, scope=scope)
        acks: list[Future[Message]] = []
        started = now_ms()
        # STARTED only for a run still going after the grace (reach.agent.startgate): a short run's terminal
        # receipt carries its start time instead
        gate = StartGate(lambda: self._send_raw(mid, started_bytes(envelope, agent_id=self._agent.agent_id,
                                                                   instance_id=self._agent.instance_id)),
                         started_ms=started, graces=self._graces, acks=acks)
        timer = RunTimer(RunClock.start(
            started_ms=started, timeout_ms=timeout_ms, heartbeat_ms=self._agent.heartbeat_timeout_ms,
            cap_ms=policy.execution_timeout_ms if policy else None, deadline=envelope.deadline), message_id=mid)
        renewer = self._renewals.start(lambda: self._renew(mid, gen, lease_ms, timer), every_s=lease_ms / 3000)
        thread: Future[Any] | None = None
        stream = ProgressStream(envelope, send=functools.partial(self._send_started_first, gate),
                                agent_id=self._agent.agent_id,
                                instance_id=self._agent.instance_id,
                                coalescer=Coalescer(interval_ms=self._progress_interval_ms,
                                                    replace_first=envelope.attempt > 1))
        context = Context(envelope=envelope, agent_id=self._agent.agent_id, instance_id=self._agent.instance_id,
                          _cancelled=lambda: self._cancelled(mid, envelope.tenant), _heartbeat=timer.beat,
                          _progress=stream)
        try:
            with (tracing.tracer().start_as_current_span(
                    f"invoke_agent {self._agent.agent_id}", kind=SpanKind.INTERNAL,
                    attributes=tracing.invoke_agent_attributes(self._agent.agent_id, envelope.capability))
                  if self._tracing() else contextlib.nullcontext()) as span:
                with lineage.running(context._lineage()):  # the client SDK's children inherit from this run
                    verdict, thread = await self._run(spec, payload, context, timer)
                used = context._usage(self._currency)
                if used is not None and span is not None:
                    span.set_attributes(tracing.usage_attributes(used))
        except BaseException:
            gate.skip()  # cancelled (shutdown): redelivered, so no STARTED for this run
            raise
        finally:
            stream.close()  # what the handler left pending goes before its outcome receipt
            timer.end("its run already ended (it timed out, or its outcome was published)")
            if thread is None:
                renewer.cancel()
        verdict = declared.after_run(verdict, spec, lambda: declared.Evidence(  # a cut run: retried only if idempotent
            self._agent.instance_id, started, now_ms() - started, gate.sent, stream.published,
            context._lineage().made))
        if thread is not None:
            # The thread outlives its timeout: it keeps its pool thread and its lease until it exits, so the
            # retry elsewhere waits for the lease instead of running beside it.
            with self._lock:
                self._lingering += 1
            asyncio.get_running_loop().create_task(self._outlive(thread, renewer, mid, gen))
        started_at = None
        if thread is None and outcomes.receipt_status(verdict.outcome)[0].is_terminal:
            started_at = gate.skip()  # ended within the grace: no STARTED, the terminal carries the start
        else:
            gate.send()  # a non-terminal outcome (a retry, a question) follows its STARTED, as before
        verdict, written = session.checked(envelope, context._session, verdict)  # ctx.session written back
        return await self._finish(envelope, verdict, acks, run_ms=now_ms() - started, release=thread is None,
                                  raw=raw, origin=origin, scope=scope, cost=context.cost, usage=used,
                                  children=context._lineage().children, started_at=started_at, session_text=written)

    async def _run(self, spec: CapabilitySpec, payload: Any, context: Context,
                   timer: RunTimer) -> tuple[Verdict, Future[Any] | None]:
        """The handler's verdict, and its thread when a sync handler is still running past its timeout. The
        timer's deadline moves with the handler's heartbeats (reach.core.timeouts.RunClock)."""
        envelope = context.envelope
        args = (payload, context) if spec.wants_context else (payload,)
        thread: Future[Any] | None = None
        try:
            if spec.is_async:
                async with asyncio.timeout(timer.remaining_s()) as cut:  # no extra task per message
                    timer.watch(cut)  # a heartbeat reschedules it
                    result = await spec.handler(*args)
            else:
                call = functools.partial(contextvars.copy_context().run, spec.handler, *args)
                thread = self._executor.submit(call)
                result = await until_due(thread, timer)
                if inspect.isawaitable(result):
                    result = await asyncio.wait_for(result, max(timer.remaining_s(), 0.0))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this run is being cancelled (shutdown): not the handler's outcome
            # The handler itself raised CancelledError: uncertain, hence retryable (never a silent success).
            return Verdict(Outcome.RETRY, error=ErrorInfo(kind="TRANSIENT", code="CANCELLED",
                                                          message="the handler raised asyncio.CancelledError")), None
        except Exception as exc:  # every handler failure becomes an outcome
            ours = isinstance(exc, TimeoutError) and timer.timed_out()  # ours: an execution or heartbeat timeout
            verdict = Verdict(Outcome.RETRY, error=timer.error()) if ours else outcomes.from_exception(exc)
            if verdict.outcome is Outcome.RETRY and verdict.error and verdict.error.code == "UNHANDLED_EXCEPTION":
                log.exception("handler of %s raised for %s", envelope.capability, envelope.message_id)
            return verdict, (thread if thread is not None and not thread.done() else None)
        context._returned(result)
        verdict = outcomes.from_result(result)
        if verdict.outcome is Outcome.COMPLETE:
            return _checked_output(spec, verdict.value), None
        return verdict, None

    async def _outlive(self, thread: Future[Any], renewer: Renewal, message_id: str,
                       generation: int) -> None:
        try:
            await asyncio.wrap_future(thread)
        except BaseException:  # noqa: BLE001 - its outcome was already reported as a timeout
            pass
        finally:
            renewer.cancel()
            with self._lock:
                self._lingering -= 1
            await self._redis(lambda: self._leases.release(message_id, generation))

    async def _finish(self, envelope: Envelope, verdict: Verdict, acks: list[Future[Message]], *,
                      run_ms: int | None = None, release: bool = False, raw: bytes | None = None,
                      origin: tuple[str, int, int] | None = None, scope: KeyScope | None = None,
                      cost: float | None = None, usage: Usage | None = None,
                      children: Spent | None = None, started_at: int | None = None,
                      session_text: str | None = None) -> Processed:
        receipt = self._receipt(envelope, verdict, run_ms, cost, usage, origin, children, started_at)
        encoded = encode_receipt(receipt)
        if len(encoded) > MAX_RECEIPT_BYTES:
            verdict = outcomes.failed("INVALID_OUTPUT", "RESULT_TOO_LARGE", (
                f"the handler's result takes {len(encoded)} bytes in its receipt; at most {MAX_RECEIPT_BYTES} fit. "
                "Store large results elsewhere (object storage) and return a reference."))
            receipt = self._receipt(envelope, verdict, run_ms, cost, usage, children=children, started_at=started_at)
            encoded = codec.encode(receipt)
        terminal = receipt.status.is_terminal
        if scope is not None and self._ledger is not None and receipt.status is Status.COMPLETED:
            # the key's result on Kafka too (reach.agent.keyledger), acknowledged before the offset is committed
            record = self._ledger.record(scope, encoded)
            acks.append(self._publisher.send(record.topic, record.key, record.value, headers=record.headers))
        mine = encoded
        if terminal:
            # Cached (and the lease dropped) before it is published: a crash in between republishes it instead
            # of rerunning; a claim in between finds the result before it could take the lease. First terminal
            # wins (reach.terminals): when the router, the timekeeper or another run ended the message first, that
            # ending is published, not this one (the handler ran; its side effect is what it is).
            encoded = await claim_ending(self._outage, self._leases, envelope.message_id, envelope.generation,
                                         encoded, scope=scope, completed=receipt.status is Status.COMPLETED,
                                         unfenced=self._unfenced)
        if session_text is not None and receipt.status is Status.COMPLETED and encoded == mine:
            # ctx.session, acknowledged before the offset as the rest: only when this run's COMPLETED is the
            # message's ending (an EXPIRED or CANCELED published first leaves the session as the caller saw it)
            acks += session.write_back(self._publisher.send, self._sessions_topic, envelope,
                                       self._agent.instance_id, session_text)
        if verdict.outcome is Outcome.INPUT:
            # Cached as this attempt's decision before it is published (as a retry's is): a redelivery of the turn
            # republishes the question instead of running the handler again to ask it twice.
            asked = Outgoing(self._topic, receipt.message_id, encoded, [(h.MESSAGE_ID, receipt.message_id.encode())])
            await self._redis(lambda: self._leases.store_retry(envelope.message_id, envelope.generation,
                                                                envelope.attempt, (asked,)))
        acks.append(self._send_raw(receipt.message_id, encoded))
        if not terminal:
            # What follows (the retry, then its receipt) must come after this receipt: wait for the acks.
            await asyncio.gather(*(asyncio.wrap_future(a) for a in acks))
        finished = Finished(envelope=envelope, verdict=verdict, raw=raw, origin=origin, run_ms=run_ms,
                            usage=receipt.usage)
        for middleware in self._middleware:
            await middleware.after_outcome(finished)
        # recorded once published (a non-terminal outcome's records acknowledged): a redelivery here never reruns it
        self._runs.ended(envelope.message_id, envelope.generation,
                         Ran(envelope.attempt, verdict.outcome, encoded if terminal else None))
        if release and not terminal:
            await self._redis(lambda: self._leases.release(envelope.message_id, envelope.generation))
        # A terminal receipt is not waited for here (no per-message ack wait): the runner commits the offset only
        # once these acks succeeded, and a refused one isolates the record there.
        return Processed(verdict.outcome, tuple(acks) if terminal else ())

    def _receipt(self, envelope: Envelope, verdict: Verdict, run_ms: int | None,
                 cost: float | None = None, usage: Usage | None = None,
                 origin: tuple[str, int, int] | None = None, children: Spent | None = None,
                 started_at: int | None = None) -> Receipt:
        status, step = outcomes.receipt_status(verdict.outcome)
        result = verdict.value if isinstance(verdict.value, bytes) else None
        asked = _asked(envelope, verdict.value, origin) if verdict.outcome is Outcome.INPUT else None
        # usage travels on the receipt that ends the generation (its terminal, or the question that ends a turn):
        # what is counted once per (message, generation); a turn that asks ran the handler too
        ends_turn = status.is_terminal or status is Status.INPUT_REQUIRED
        return receipt_for(envelope, status, agent_id=self._agent.agent_id, instance_id=self._agent.instance_id,
                           error=verdict.error, step_status=step, result=result, cost=cost, input=asked,
                           usage=usage if ends_turn else None,
                           retry_after_ms=verdict.retry_after_ms,
                           timings={**({} if run_ms is None else {"run_ms": run_ms}), **(verdict.evidence or {}),
                                    # STARTED was skipped (reach.agent.startgate): the fold reads the start here
                                    **({} if started_at is None else {STARTED_AT: started_at}),
                                    # what the children it waited for spent: the status row sums it (0043)
                                    **(as_timings(children) if ends_turn and children is not None else {})})

    async def _reuse(self, envelope: Envelope, first: bytes) -> Processed:
        """COMPLETED with the result of the message that ran the handler for this business key; claimed like any
        terminal (reach.terminals): when the timekeeper ended this message first, that ending is published."""
        ran = codec.decode(first, Receipt)
        log.info("%s reuses the result of %s (same idempotency_key)", envelope.message_id, ran.message_id)
        again = codec.encode(receipt_for(
            envelope, Status.COMPLETED, agent_id=self._agent.agent_id, instance_id=self._agent.instance_id,
            step_status=ran.step_status or StepStatus.OK, result=ran.result, reused_from=ran.message_id,
            timings={"idempotency_hit": 1}))
        # no scope: the key already holds the result of the message that ran it, and this one never held the key
        ended = await claim_ending(self._outage, self._leases, envelope.message_id, envelope.generation, again,
                                   unfenced=self._unfenced)
        outcome = Outcome.COMPLETE if ended == again else _outcome(codec.decode(ended, Receipt).status)
        return Processed(outcome, (self._send_raw(envelope.message_id, ended),))

    async def _republish(self, envelope: Envelope, claim: Claim) -> Processed:
        if claim.retry is not None:  # this attempt already failed and its retry was decided: publish it again
            if claim.result is not None:  # a terminal it won (a dead letter): the letter and its receipt again
                await publish_in_order(self._publisher, claim.retry)
                return Processed(_outcome(codec.decode(claim.result, Receipt).status))
            last = codec.decode(claim.retry[-1].value or b"", Receipt)
            if not last.status.is_terminal:
                await publish_in_order(self._publisher, claim.retry)
                return Processed(Outcome.INPUT if last.status is Status.INPUT_REQUIRED else Outcome.RETRY)
            # a crash between caching a dead letter (or an expiry) and claiming it: claim now, publish the winner
            ended = await publish_ending(self._publisher, claim.retry, outage=self._outage, leases=self._leases,
                                         message_id=envelope.message_id, generation=envelope.generation,
                                         unfenced=self._unfenced)
            return Processed(_outcome(codec.decode(ended, Receipt).status))
        receipt = codec.decode(claim.result or b"", Receipt)
        again = receipt.model_copy(update={"at": now_ms(), "timings": {**receipt.timings, "cache_hit": 1}})
        return Processed(_outcome(receipt.status), (self._send(again),))

    async def _renew(self, message_id: str, generation: int, lease_ms: int, timer: RunTimer) -> bool:
        """One renewal; False ends them (someone else holds the lease, and the handler's heartbeats now raise
        LeaseLost). Redis errors only skip a turn."""
        ours = await self._redis(lambda: self._leases.renew(message_id, generation, lease_ms))
        if ours is False:
            log.warning("lease of %s was taken by another run while its handler ran", message_id)
            timer.end("its lease was taken by another run")
            return False
        return True

    async def _redis(self, call: Callable[[], Awaitable[T]]) -> T | None:
        return await redis_call(self._outage, call)

    def _send_started_first(self, gate: StartGate, receipt: Receipt) -> Future[Message]:
        gate.send()  # a progress receipt never precedes the run's STARTED
        return self._send(receipt)

    def _send(self, receipt: Receipt) -> Future[Message]:
        return self._send_raw(receipt.message_id, encode_receipt(receipt))

    def _send_raw(self, message_id: str, value: bytes) -> Future[Message]:
        return self._publisher.send(self._topic, message_id, value, headers=[(h.MESSAGE_ID, message_id.encode())])


def _asked(envelope: Envelope, value: object, origin: tuple[str, int, int] | None) -> InputRequest | None:
    """What an INPUT_REQUIRED receipt carries: the question, its answer's schema, the turn's number, and where this
    turn's envelope sits in the inbox (the next turn is built from it, reach.core.turns.next_turn)."""
    if not isinstance(value, NeedsInput):
        return None
    topic, partition, offset = origin if origin is not None else (None, None, None)
    return InputRequest(question=value.question, answer_schema=value.schema_text,
                        turn=len(conversation(envelope.headers)) + dropped_turns(envelope.headers) + 1,
                        origin_topic=topic, origin_partition=partition, origin_offset=offset)


def _outcome(status: Status) -> Outcome:
    """The outcome a terminal receipt stands for (what `process` reports for an ending it republishes)."""
    return {Status.COMPLETED: Outcome.COMPLETE, Status.REJECTED: Outcome.REJECT}.get(status, Outcome.FAIL)


def key_scope(envelope: Envelope, policy: Policy | None, *, lease_ms: int, now: int,
              key: str | None = None) -> KeyScope | None:
    """The business key of an envelope, or None when it has none beyond its message_id (the default, which the
    message_id lease already deduplicates) and no `key` is given for it (an idempotent capability's content key).
    Held while the envelope can still run: until its deadline."""
    own = envelope.idempotency_key
    if own and own != envelope.message_id:
        key = own
    if key is None:
        return None
    window = policy.idempotency_window_ms if policy and policy.idempotency_window_ms else None
    return KeyScope(tenant=envelope.tenant, capability=envelope.capability, key=key,
                    window_ms=window or DEFAULT_IDEMPOTENCY_WINDOW_MS, hold_ms=max(lease_ms, envelope.deadline - now))


class Renewal:
    """Calls `renew` every `every_s` on the running loop until it returns False or `cancel()`; queued on its
    `Renewals` (no loop timer of its own: most handlers finish before the first renewal is due)."""

    def __init__(self, renew: Callable[[], Awaitable[bool]], *, every_s: float, renewals: Renewals) -> None:
        self._renew = renew
        self.every_s = every_s
        self._renewals = renewals
        self._task: asyncio.Task[None] | None = None
        self.cancelled = False

    def due(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.cancelled:
            self._task = loop.create_task(self._once())

    async def _once(self) -> None:
        if await self._renew() and not self.cancelled:
            self._renewals.queue(self)

    def cancel(self) -> None:
        self.cancelled = True  # left in its queue until due, then dropped
        if self._task is not None:
            self._task.cancel()


class Renewals:
    """The renewal timers of one SDK loop: one loop timer per renewal interval, not one per run.

    Runs with the same lease length renew at the same interval, so their due times come in the order they were
    queued: a queue per interval and a timer for its head (as reach.agent.startgate.Graces does for the grace).
    A run that ended before its first renewal (the common case) stays queued, cancelled, until then."""

    def __init__(self) -> None:
        self._queues: dict[float, deque[tuple[float, Renewal]]] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, renew: Callable[[], Awaitable[bool]], *, every_s: float) -> Renewal:
        renewal = Renewal(renew, every_s=every_s, renewals=self)
        self.queue(renewal)
        return renewal

    def queue(self, renewal: Renewal) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a pipeline reused across asyncio.run calls): start afresh
            self._loop, self._queues, self._timers = loop, {}, {}
        every = renewal.every_s
        queue = self._queues.get(every)
        if queue is None:
            queue = self._queues[every] = deque()
        queue.append((loop.time() + every, renewal))
        if every not in self._timers:
            self._timers[every] = loop.call_at(queue[0][0], self._due, every)

    def _due(self, every: float) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        queue = self._queues.get(every)
        del self._timers[every]
        while queue and queue[0][0] <= now:
            queue.popleft()[1].due(loop)  # a no-op for a run that ended already
        if queue:
            self._timers[every] = loop.call_at(queue[0][0], self._due, every)
        else:
            self._queues.pop(every, None)  # an interval no run uses any more holds nothing


def _payload(envelope: Envelope, spec: CapabilitySpec) -> tuple[Any, Verdict | None]:
    """The handler's argument (JSON decoded when the content type says so), or a REJECTED verdict.

    Any failure here is the payload's fault (bad JSON, nesting deeper than the parser's recursion limit, a
    validator tripping over it): it is REJECTED, never allowed to escape and stop the worker."""
    if not envelope.content_type.startswith("application/json"):
        return envelope.payload, None
    try:
        payload = json.loads(envelope.payload)
    except RecursionError:
        return None, outcomes.rejected("INVALID_JSON", "payload is nested too deeply to decode "
                                       f"({len(envelope.payload)} bytes); flatten it")
    except Exception as exc:  # noqa: BLE001 - ValueError, UnicodeDecodeError, MemoryError...: all the payload's
        return None, outcomes.rejected("INVALID_JSON", f"payload is not valid JSON: {type(exc).__name__}: {exc}"[:1000])
    try:
        problem = violation(spec.input_validator, payload)
    except Exception as exc:  # noqa: BLE001 - e.g. RecursionError inside the validator on deep input
        problem = f"could not be validated ({type(exc).__name__}: {exc})"[:1000]
    if problem is not None:
        return None, outcomes.rejected("INPUT_SCHEMA", f"payload violates the input schema of "
                                       f"{spec.record.name}@{spec.record.version} {problem}")
    return payload, None


def _checked_output(spec: CapabilitySpec, value: Any) -> Verdict:
    """COMPLETE with the result as bytes (JSON unless already bytes), or FAIL when it breaks the contract."""
    if isinstance(value, bytes):
        return Verdict(Outcome.COMPLETE, value=value)
    try:
        problem = violation(spec.output_validator, value)
    except Exception as exc:  # noqa: BLE001 - a result the validator cannot walk breaks the contract too
        problem = f"could not be validated ({type(exc).__name__}: {exc})"[:1000]
    if problem is not None:
        return outcomes.failed("INVALID_OUTPUT", "OUTPUT_SCHEMA", f"the handler's result violates the output "
                               f"schema of {spec.record.name}@{spec.record.version} {problem}")
    try:
        return Verdict(Outcome.COMPLETE, value=json.dumps(value, separators=(",", ":")).encode())
    except (TypeError, ValueError, RecursionError) as exc:
        return outcomes.failed("INVALID_OUTPUT", "NOT_JSON", f"the handler's result is not JSON: {exc}")
