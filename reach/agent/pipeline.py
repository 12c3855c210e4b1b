"""One message through the SDK: validate, dedupe by lease, STARTED, handler, outcome receipt, acks."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
from concurrent.futures import Executor, Future
from typing import Any

from confluent_kafka import Message
from opentelemetry.trace import SpanKind

from reach import codec, tracing
from reach import headers as h
from reach.agent import outcomes
from reach.agent.agent import Agent, CapabilitySpec, Context
from reach.agent.contract import violation
from reach.agent.idempotency import Leases
from reach.agent.middleware import Finished, Middleware
from reach.agent.outcomes import Outcome, Verdict
from reach.agent.publisher import Publisher
from reach.envelopes import now_ms
from reach.receipts import receipt_for
from reach.records import Envelope, Receipt, Status

log = logging.getLogger("reach.agent")
LEASE_POLL_S = 0.25


class Pipeline:
    """Runs on the SDK's event loop; `process` returns once every receipt it published is acknowledged."""

    def __init__(self, agent: Agent, *, publisher: Publisher, leases: Leases, receipts_topic: str,
                 executor: Executor, middleware: list[Middleware]) -> None:
        self._agent = agent
        self._middleware = middleware
        self._publisher = publisher
        self._leases = leases
        self._topic = receipts_topic
        self._executor = executor

    async def process(self, envelope: Envelope, headers: list[tuple[str, bytes]], *, raw: bytes | None = None,
                      origin: tuple[str, int, int] | None = None) -> Outcome:
        """Handle one envelope at least once, and in effect once per (message_id, generation)."""
        ctx = tracing.extract(headers, envelope)
        with tracing.tracer().start_as_current_span(
            f"reach.handle {envelope.capability}", context=ctx, kind=SpanKind.CONSUMER,
            attributes={"reach.message_id": envelope.message_id, "reach.attempt": envelope.attempt},
        ):
            spec = self._agent.match(envelope)
            if spec is None:
                verdict = outcomes.rejected("NO_MATCHING_CAPABILITY", (
                    f"{self._agent.agent_id} does not serve {envelope.capability}@{envelope.capability_version}; "
                    f"it serves {', '.join(f'{n}@{c.record.version}' for n, c in self._agent.capabilities.items())}"))
                return await self._finish(envelope, verdict, [])
            payload, bad = _payload(envelope, spec)
            if bad is not None:
                return await self._finish(envelope, bad, [])
            return await self._claimed(envelope, spec, payload, raw, origin)

    async def _claimed(self, envelope: Envelope, spec: CapabilitySpec, payload: Any, raw: bytes | None,
                       origin: tuple[str, int, int] | None) -> Outcome:
        mid, gen = envelope.message_id, envelope.generation
        timeout_ms = envelope.execution_timeout_ms if envelope.execution_timeout_ms > 0 \
            else self._agent.execution_timeout_ms
        lease_ms = timeout_ms + self._agent.lease_margin_ms
        while True:
            cached = await self._leases.cached(mid, gen)
            if cached is not None:
                return await self._republish(cached)
            holder = await self._leases.claim(mid, gen, lease_ms)
            if holder is None:
                break
            # Another run holds the lease: never run concurrently; wait until it finishes or its lease lapses.
            await asyncio.sleep(LEASE_POLL_S)
        acks = [self._send(receipt_for(envelope, Status.STARTED, agent_id=self._agent.agent_id,
                                       instance_id=self._agent.instance_id))]
        renewer = asyncio.create_task(self._renew(mid, gen, lease_ms))
        started = now_ms()
        try:
            verdict = await self._run(spec, payload, envelope, timeout_ms / 1000)
        finally:
            renewer.cancel()
        return await self._finish(envelope, verdict, acks, run_ms=now_ms() - started, release=True, raw=raw,
                                  origin=origin)

    async def _run(self, spec: CapabilitySpec, payload: Any, envelope: Envelope, timeout_s: float) -> Verdict:
        context = Context(envelope=envelope, agent_id=self._agent.agent_id, instance_id=self._agent.instance_id)
        args = (payload, context) if spec.wants_context else (payload,)
        try:
            if spec.is_async:
                result = await asyncio.wait_for(spec.handler(*args), timeout_s)
            else:
                call = functools.partial(contextvars.copy_context().run, spec.handler, *args)
                loop = asyncio.get_running_loop()
                result = await asyncio.wait_for(loop.run_in_executor(self._executor, call), timeout_s)
                if inspect.isawaitable(result):
                    result = await asyncio.wait_for(result, timeout_s)
        except Exception as exc:  # every handler failure becomes an outcome; cancellation passes through
            verdict = outcomes.from_exception(exc)
            if verdict.outcome is Outcome.RETRY and verdict.error and verdict.error.code == "UNHANDLED_EXCEPTION":
                log.exception("handler of %s raised for %s", envelope.capability, envelope.message_id)
            return verdict
        verdict = outcomes.from_result(result)
        if verdict.outcome is Outcome.COMPLETE:
            return _checked_output(spec, verdict.value)
        return verdict

    async def _finish(self, envelope: Envelope, verdict: Verdict, acks: list[Future[Message]], *,
                      run_ms: int | None = None, release: bool = False, raw: bytes | None = None,
                      origin: tuple[str, int, int] | None = None) -> Outcome:
        status, step = outcomes.receipt_status(verdict.outcome)
        result = verdict.value if isinstance(verdict.value, bytes) else None
        receipt = receipt_for(envelope, status, agent_id=self._agent.agent_id,
                              instance_id=self._agent.instance_id, error=verdict.error, step_status=step,
                              result=result, retry_after_ms=verdict.retry_after_ms,
                              timings={} if run_ms is None else {"run_ms": run_ms})
        encoded = codec.encode(receipt)
        if release and status.is_terminal:
            # Cached before it is published: a crash in between republishes it instead of rerunning.
            await self._leases.store(envelope.message_id, envelope.generation, encoded)
        acks.append(self._send_raw(receipt.message_id, encoded))
        await asyncio.gather(*(asyncio.wrap_future(a) for a in acks))
        finished = Finished(envelope=envelope, verdict=verdict, raw=raw, origin=origin, run_ms=run_ms)
        for middleware in self._middleware:
            await middleware.after_outcome(finished)
        if release:
            await self._leases.release(envelope.message_id, envelope.generation)
        return verdict.outcome

    async def _republish(self, cached: bytes) -> Outcome:
        receipt = codec.decode(cached, Receipt)
        again = receipt.model_copy(update={"at": now_ms(), "timings": {**receipt.timings, "cache_hit": 1}})
        await asyncio.wrap_future(self._send(again))
        return {Status.COMPLETED: Outcome.COMPLETE, Status.REJECTED: Outcome.REJECT}.get(receipt.status, Outcome.FAIL)

    async def _renew(self, message_id: str, generation: int, lease_ms: int) -> None:
        while True:
            await asyncio.sleep(lease_ms / 3000)
            if not await self._leases.renew(message_id, generation, lease_ms):
                log.warning("lease of %s lapsed while its handler ran; another run may start", message_id)
                return

    def _send(self, receipt: Receipt) -> Future[Message]:
        return self._send_raw(receipt.message_id, codec.encode(receipt))

    def _send_raw(self, message_id: str, value: bytes) -> Future[Message]:
        return self._publisher.send(self._topic, message_id, value, headers=[(h.MESSAGE_ID, message_id.encode())])


def _payload(envelope: Envelope, spec: CapabilitySpec) -> tuple[Any, Verdict | None]:
    """The handler's argument (JSON decoded when the content type says so), or a REJECTED verdict."""
    if not envelope.content_type.startswith("application/json"):
        return envelope.payload, None
    try:
        payload = json.loads(envelope.payload)
    except ValueError as exc:
        return None, outcomes.rejected("INVALID_JSON", f"payload is not valid JSON: {exc}")
    problem = violation(spec.input_validator, payload)
    if problem is not None:
        return None, outcomes.rejected("INPUT_SCHEMA", f"payload violates the input schema of "
                                       f"{spec.record.name}@{spec.record.version} {problem}")
    return payload, None


def _checked_output(spec: CapabilitySpec, value: Any) -> Verdict:
    """COMPLETE with the result as bytes (JSON unless already bytes), or FAIL when it breaks the contract."""
    if isinstance(value, bytes):
        return Verdict(Outcome.COMPLETE, value=value)
    problem = violation(spec.output_validator, value)
    if problem is not None:
        return outcomes.failed("INVALID_OUTPUT", "OUTPUT_SCHEMA", f"the handler's result violates the output "
                               f"schema of {spec.record.name}@{spec.record.version} {problem}")
    try:
        return Verdict(Outcome.COMPLETE, value=json.dumps(value, separators=(",", ":")).encode())
    except (TypeError, ValueError) as exc:
        return outcomes.failed("INVALID_OUTPUT", "NOT_JSON", f"the handler's result is not JSON: {exc}")
