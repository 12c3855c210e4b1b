"""Building request envelopes with the design's defaults (ULID ids, split timeouts, total budget)."""

from __future__ import annotations

import json
import time
from typing import Any

from ulid import ULID

from reach.core.allowance import check_budget
from reach.core.marks import kept
from reach.core.timeouts import DEFAULT_BUDGET_MS, DEFAULT_DELIVERY_TIMEOUT_MS, NOT_SET, check_timeout_ms
from reach.core.versions import parse_range
from reach.errors import InvalidName, ReachError
from reach.names import check_agent_id, check_capability
from reach.records import Envelope, Policy, RoutingHints

MAX_PAYLOAD_BYTES = 256 * 1024
DELIVERY_TIMEOUT_MS = DEFAULT_DELIVERY_TIMEOUT_MS  # ROUTED -> STARTED (reach.core.timeouts)
EXECUTION_TIMEOUT_MS = NOT_SET   # STARTED -> terminal: not set, the agent's declared timeout applies (0029)
BUDGET_MS = DEFAULT_BUDGET_MS    # created_at -> deadline (reach.core.timeouts)


class PayloadTooLarge(ReachError):
    """A payload over the size limit is refused at send time."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_id() -> str:
    return str(ULID())


def encode_payload(payload: Any) -> tuple[bytes, str]:
    """JSON-encode anything that is not already bytes; returns (bytes, content_type)."""
    if isinstance(payload, (bytes, bytearray)):
        return bytes(payload), "application/octet-stream"
    return json.dumps(payload, separators=(",", ":")).encode(), "application/json"


def new_envelope(
    capability: str,
    payload: Any,
    *,
    version: str = "*",
    session_key: str | None = None,
    to_agent: str | None = None,
    region: str | None = None,
    tags: list[str] | None = None,
    priority: int = 0,
    tenant: str = "default",
    source: str = "reach-client",
    trace_id: str | None = None,
    parent_id: str | None = None,
    intent: str | None = None,
    budget_ms: int = BUDGET_MS,
    delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
    execution_timeout_ms: int = EXECUTION_TIMEOUT_MS,
    expire_at: int | None = None,
    max_attempts: int = 0,
    idempotency_key: str | None = None,
    reply_to: str | None = None,
    callback: str | None = None,
    headers: dict[str, str] | None = None,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    session_snapshot: str | None = None,
    max_tokens: int | None = None,
    max_cost_micros: int | None = None,
) -> Envelope:
    """A valid Envelope, or a ReachError saying which argument is wrong. `execution_timeout_ms` 0 (the default)
    leaves the run's timeout to the agent's declaration; a value asks for less (reach.core.timeouts). `max_tokens` /
    `max_cost_micros` budget the request and every request it causes (reach.core.allowance; None: no budget)."""
    check_capability(capability)
    from reach.intent.catalog import RESERVED

    if capability == RESERVED and not (intent or "").strip():
        raise InvalidName(f"An envelope for {RESERVED} must carry an intent (the request in words or an intent "
                          "id): pass intent=..., or name a capability instead.")
    parse_range(version)
    check_timeout_ms(execution_timeout_ms, what="execution_timeout_ms", optional=True)
    max_tokens = check_budget(max_tokens, "max_tokens")
    max_cost_micros = check_budget(max_cost_micros, "max_cost_micros")
    if to_agent:
        check_agent_id(to_agent)
    body, content_type = encode_payload(payload)
    if len(body) > max_payload_bytes:
        raise PayloadTooLarge(
            f"Payload is {len(body):,} bytes; the limit is {max_payload_bytes:,}. "
            "Send a reference (a URL or object key) instead of the data."
        )
    created = now_ms()
    message_id = new_id()
    return Envelope(
        message_id=message_id,
        trace_id=trace_id or new_id(),
        parent_id=parent_id,
        tenant=tenant,
        source=source,
        capability=capability,
        capability_version=version,
        intent=intent,
        to_agent=to_agent,
        payload=body,
        content_type=content_type,
        routing=RoutingHints(region=region, session_key=session_key, tags=tags or [], priority=priority),
        created_at=created,
        deadline=created + budget_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        execution_timeout_ms=execution_timeout_ms,
        expire_at=expire_at,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key or message_id,
        reply_to=reply_to,
        callback=callback,
        headers=kept(headers, message_id=None, to_agent=None),  # a caller's `reach-*` marks are the product's
        session_snapshot=session_snapshot,
        max_tokens=max_tokens,
        max_cost_micros=max_cost_micros,
    )


POLICY_FIELDS = ("budget_ms", "delivery_timeout_ms", "execution_timeout_ms")
"""The POLICY fields a sender copies into an envelope it does not set them on (`new_envelope` arguments)."""


def policy_defaults(policy: Policy | None) -> dict[str, int]:
    """The `new_envelope` arguments a capability's POLICY sets (only the positive ones it has)."""
    if policy is None:
        return {}
    values = {name: getattr(policy, name) for name in POLICY_FIELDS}
    return {name: value for name, value in values.items() if value is not None and value > 0}


def routing_key(envelope: Envelope) -> str:
    """Capability and inbox topics are keyed by session_key, else message_id (docs/architecture.md, Topics)."""
    return envelope.routing.session_key or envelope.message_id
