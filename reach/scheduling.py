"""Planning a retry on a delay tier: the next attempt's envelope, its tier, and when it is due."""

from __future__ import annotations

import random
from dataclasses import dataclass

from reach import codec, headers
from reach.envelopes import routing_key
from reach.names import Names
from reach.records import Envelope
from reach.retry import Limits, backoff_ms, tier_for


@dataclass(frozen=True)
class PlannedRetry:
    """One record to produce to a delay tier, and the receipt facts that go with it."""

    topic: str
    key: str
    value: bytes
    headers: headers.Headers
    envelope: Envelope
    due_at: int
    delay_ms: int
    nominal_ms: int


def plan_retry(envelope: Envelope, *, names: Names, tiers: list[str], limits: Limits, failed_instance: str | None,
               now_ms: int, retry_after_ms: int | None = None, rng: random.Random | None = None) -> PlannedRetry:
    """Attempt+1 with the failed instance excluded, due after the jittered backoff (or the agent's hint)."""
    nominal, delay = backoff_ms(envelope.attempt, limits, rng)
    if retry_after_ms:
        nominal = delay = min(retry_after_ms, limits.max_ms)
    excluded = list(envelope.excluded_instances)
    if failed_instance and failed_instance not in excluded:
        excluded.append(failed_instance)
    nxt = envelope.model_copy(update={"attempt": envelope.attempt + 1, "reroutes": 0,
                                      "excluded_instances": excluded})
    due = now_ms + delay
    target = names.capability(envelope.capability)
    hdrs: headers.Headers = [(headers.DUE_AT, str(due).encode()), (headers.TARGET, target.encode()),
            (headers.MESSAGE_ID, envelope.message_id.encode())]
    return PlannedRetry(topic=names.retry(tier_for(delay, tiers)), key=routing_key(nxt), value=codec.encode(nxt),
                        headers=hdrs, envelope=nxt, due_at=due, delay_ms=delay, nominal_ms=nominal)
