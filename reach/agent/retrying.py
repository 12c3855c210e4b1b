"""After an ATTEMPT_FAILED: schedule the retry on a delay tier, dead-letter, or expire (Uber's order)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future

from confluent_kafka import Message

from reach import codec, dlq
from reach.agent.middleware import Finished, Middleware
from reach.agent.outcomes import Outcome, Verdict
from reach.agent.publisher import Publisher
from reach.envelopes import now_ms
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Policy, Receipt, Status
from reach.retry import Action, Failure, Limits, classify
from reach.scheduling import plan_retry

Origin = tuple[str, int, int]


class RetryStep(Middleware):
    """Decides what follows a retryable failure and publishes it; every send is awaited before the next."""

    def __init__(self, *, agent_id: str, instance_id: str, publisher: Publisher, names: Names,
                 tiers: list[str], policy: Callable[[str], Policy | None] = lambda _: None) -> None:
        self._policy = policy
        self._agent_id = agent_id
        self._instance_id = instance_id
        self._publisher = publisher
        self._names = names
        self._tiers = tiers

    async def after_outcome(self, finished: Finished) -> None:
        if finished.verdict.outcome is Outcome.RETRY:
            await self.after_failure(finished.envelope, finished.verdict, finished.raw, finished.origin)

    async def after_failure(self, envelope: Envelope, verdict: Verdict, raw: bytes | None,
                            origin: Origin | None) -> None:
        now = now_ms()
        limits = Limits.resolve(envelope, self._policy(envelope.capability))
        action = classify(Failure.TRANSIENT, attempt=envelope.attempt, reroutes=envelope.reroutes, limits=limits,
                          now_ms=now, deadline_ms=envelope.deadline)
        if action is Action.RETRY:
            plan = plan_retry(envelope, names=self._names, tiers=self._tiers, limits=limits,
                              failed_instance=self._instance_id, now_ms=now, retry_after_ms=verdict.retry_after_ms)
            # The retry record first, then its receipt: a crash in between redelivers the input and
            # schedules again (harmless: the attempt is idempotent), never a receipt without a retry.
            await self._ack(self._publisher.send(plan.topic, plan.key, plan.value, headers=plan.headers))
            await self._receipt(receipt_for(envelope, Status.RETRY_SCHEDULED, agent_id=self._agent_id,
                                            instance_id=self._instance_id, due_at=plan.due_at,
                                            retry_after_ms=plan.delay_ms,
                                            timings={"nominal_delay_ms": plan.nominal_ms}))
            return
        last = verdict.error
        if action is Action.EXPIRE:
            error = ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED",
                              message=f"the total budget ended before a retry could run; last error: {_text(last)}")
            await self._receipt(receipt_for(envelope, Status.EXPIRED, agent_id=self._agent_id,
                                            instance_id=self._instance_id, error=error))
            return
        error = ErrorInfo(kind=last.kind if last else "TRANSIENT", code=dlq.RETRIES_EXHAUSTED,
                          message=f"{envelope.attempt} of {limits.max_attempts} attempts failed; last: {_text(last)}")
        topic, partition, offset = origin or (self._names.inbox(self._agent_id), -1, -1)
        value, headers = dlq.letter(raw if raw is not None else codec.encode(envelope), reason=dlq.RETRIES_EXHAUSTED,
                                    error=error, origin=(topic, partition, offset), envelope=envelope,
                                    agent_id=self._agent_id)
        await self._ack(self._publisher.send(self._names.dlq, envelope.message_id, value, headers=headers))
        await self._receipt(receipt_for(envelope, Status.DEAD_LETTERED, agent_id=self._agent_id,
                                        instance_id=self._instance_id, error=error))

    async def _receipt(self, receipt: Receipt) -> None:
        await self._ack(self._publisher.send(self._names.receipts, receipt.message_id, codec.encode(receipt)))

    @staticmethod
    async def _ack(future: Future[Message]) -> None:
        await asyncio.wrap_future(future)


def _text(error: ErrorInfo | None) -> str:
    return f"{error.code}: {error.message}" if error else "unknown"
