"""After an ATTEMPT_FAILED: publish what `reach.failures.after_failure` decided (retry, dead letter or expiry)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reach.agent.ending import Unfenced, publish_ending, publish_in_order
from reach.agent.idempotency import LeaseStore
from reach.agent.middleware import Finished, Middleware
from reach.agent.outage import Outage
from reach.agent.outcomes import Outcome, Verdict
from reach.agent.publisher import Sender
from reach.agent.redisguard import redis_call
from reach.core.retry import Failure, Limits
from reach.envelopes import now_ms
from reach.failures import after_failure
from reach.kafka import codec
from reach.names import Names
from reach.records import Envelope, ErrorInfo, Policy

log = logging.getLogger("reach.agent")
Origin = tuple[str, int, int]


class RetryStep(Middleware):
    """Caches the decision per (message, generation, attempt), then publishes its records in order, each acked."""

    def __init__(self, *, agent_id: str, instance_id: str, publisher: Sender, names: Names, tiers: list[str],
                 leases: LeaseStore | None = None, policy: Callable[[str], Policy | None] = lambda _: None,
                 redis_outage: Outage | None = None, unfenced: Unfenced | None = None) -> None:
        self._policy = policy
        self._unfenced = unfenced if unfenced is not None else Unfenced()  # share the pipeline's
        self._outage = redis_outage or Outage()  # share the pipeline's: one outage, one backoff
        self._agent_id = agent_id
        self._instance_id = instance_id
        self._publisher = publisher
        self._names = names
        self._tiers = tiers
        self._leases = leases

    async def after_outcome(self, finished: Finished) -> None:
        if finished.verdict.outcome is Outcome.RETRY:
            await self.after_failure(finished.envelope, finished.verdict, finished.raw, finished.origin)

    async def after_failure(self, envelope: Envelope, verdict: Verdict, raw: bytes | None,
                            origin: Origin | None) -> None:
        error = verdict.error or ErrorInfo(kind="TRANSIENT", code="UNKNOWN", message="unknown")
        decided = after_failure(
            Failure.TRANSIENT, envelope, error=error, names=self._names, tiers=self._tiers,
            limits=Limits.resolve(envelope, self._policy(envelope.capability)), now_ms=now_ms(),
            failed_instance=self._instance_id, raw=raw if raw is not None else codec.encode(envelope),
            origin=origin or (self._names.inbox(self._agent_id), -1, -1), agent_id=self._agent_id,
            instance_id=self._instance_id, retry_after_ms=verdict.retry_after_ms)
        leases = self._leases
        if leases is not None:
            # Cached before publishing: a redelivery of this attempt republishes these records instead of
            # rerunning the handler and forking the retry chain (a second jitter, a second dead letter).
            # Redis is a cache: while it is out (the shared backoff) a redelivery may rerun the handler.
            try:
                await redis_call(self._outage, lambda: leases.store_retry(
                    envelope.message_id, envelope.generation, envelope.attempt, decided.records))
            except Exception as exc:  # noqa: BLE001 - not Redis (that is the outage's): still only a cache
                log.warning("could not cache the retry of %s (%s)", envelope.message_id, exc)
        if decided.receipt.status.is_terminal:  # dead letter or expiry: first terminal wins (reach.terminals)
            await publish_ending(self._publisher, decided.records, outage=self._outage, leases=leases,
                                 message_id=envelope.message_id, generation=envelope.generation,
                                 unfenced=self._unfenced)
        else:
            await publish_in_order(self._publisher, decided.records)
