"""Fallback (pure): the endings a capability's POLICY `fallback` serves, the child envelope it sends, and the check
that a chain of fallbacks ends.

A request to C that ends FAILED (after its retries; the router's OVERLOAD and UNAVAILABLE endings are FAILED with
that error kind), DEAD_LETTERED or UNROUTABLE goes to C's fallback F as a child of the same trace: same payload and
caller's asks, the parent's absolute deadline (the budget that remains), the parent's callback (the caller hears the
final outcome once), and a derived id `<message_id>-fb<generation>` (the caller's `created_at` kept): producing it
again yields the same message, byte for byte.
The router sends it for the endings it decides, the status fold for an agent's (docs/decisions/0034) and for the
timekeeper's and the delay tiers' that their receipts ask for (`asked`, docs/decisions/0046).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reach.core.allowance import inherit, of_usage
from reach.core.lifecycle import FallbackRef, StatusRow
from reach.errors import InvalidName
from reach.names import check_capability
from reach.records import Receipt, Status

MAX_DEPTH = 3
"""A chain C -> F -> G -> H is three hops: the most `reach policy set` accepts and a child at that depth sends none."""
OF_HEADER = "reach-fallback-of"  # Envelope.headers: the message this child serves
DEPTH_HEADER = "reach-fallback-depth"  # Envelope.headers: hops from the caller's request (1 for the first child)
SERVED: frozenset[Status] = frozenset({Status.FAILED, Status.DEAD_LETTERED, Status.UNROUTABLE})


@dataclass(frozen=True, slots=True)
class NotSent:
    """Why no child was sent for an ending the fallback would serve."""

    reason: str


def serves(status: Status) -> bool:
    """Whether an ending with this status goes to the capability's fallback (never COMPLETED, REJECTED: the same
    input would be refused again, EXPIRED: no budget is left, CANCELED: the caller asked for it)."""
    return status in SERVED


def child_id(message_id: str, generation: int) -> str:
    """The child's message id: derived, so a batch read again or a receipt replayed sends the same message."""
    return f"{message_id}-fb{generation}"


def verified_parent(message_id: str, parent: str | None) -> str | None:
    """`parent` when `message_id` is `child_id(parent, generation)` for some generation (a child the product made),
    else None: an OF_HEADER anyone else set names nothing."""
    head = f"{parent}-fb"
    if not parent or not message_id.startswith(head) or not message_id[len(head):].isdigit():
        return None
    return parent if message_id == child_id(parent, int(message_id[len(head):])) else None


def depth(envelope: Mapping[str, Any]) -> int:
    """How many fallbacks deep this envelope is (0: the caller's own request)."""
    text = (envelope.get("headers") or {}).get(DEPTH_HEADER, "0")
    return int(text) if str(text).isdigit() else 0


def child(envelope: Mapping[str, Any], *, fallback: str, now: int, ended: StatusRow | None = None) -> dict[
        str, Any] | NotSent:
    """The child envelope (an Avro dict) sending `envelope`'s request to `fallback`, or why none is sent. `ended`: the
    row of the run that ended (an agent's ending): the child's budget is what is left after that run's usage and its
    children's (docs/decisions/0045)."""
    try:
        check_capability(fallback)
    except InvalidName:  # a control record written past `reach policy set`: never a crash, never a topic name
        return NotSent(f"the fallback {fallback[:100]!r} is not a capability name")
    hops = depth(envelope)
    if hops >= MAX_DEPTH:
        return NotSent(f"the fallback chain is {hops} deep already (at most {MAX_DEPTH})")
    if fallback == envelope["capability"]:
        return NotSent(f"{fallback} is its own fallback")
    if envelope["deadline"] <= now:
        return NotSent("the budget is spent: no time is left for a fallback")
    parent = envelope["message_id"]
    return {
        **envelope,
        "message_id": child_id(parent, envelope.get("generation") or 0),
        "parent_id": parent,
        "capability": fallback,
        "capability_version": "*",
        "intent": None,
        "to_agent": None,  # an agent of the primary capability does not serve the fallback
        "schema_version": None,  # created_at stays the caller's: the child is the same bytes however often it is made
        "attempt": 1,
        "generation": 0,
        "reroutes": 0,
        "excluded_instances": [],
        "headers": {**(envelope.get("headers") or {}), OF_HEADER: parent, DEPTH_HEADER: str(hops + 1)},
        **(_left(envelope, ended) if ended is not None else {}),
    }


def _left(envelope: Mapping[str, Any], ended: StatusRow) -> dict[str, int]:
    """The budget fields a fallback child gets: the request's, less what the run that failed spent."""
    spent = of_usage(ended.usage) + of_usage(ended.children_usage)
    return inherit({name: envelope.get(name) for name in ("max_tokens", "max_cost_micros")}, spent, {})


def key_of(envelope: Mapping[str, Any]) -> str:
    """The child's key on its capability topic: the session key, else the message id (as every envelope's)."""
    return str((envelope.get("routing") or {}).get("session_key") or envelope["message_id"])


def chain_problem(capability: str, fallback: str, fallback_of: Callable[[str], str | None], *,
                  max_depth: int = MAX_DEPTH) -> str | None:
    """Why `capability -> fallback` may not be set given the other capabilities' fallbacks (None: it may): the chain
    it starts comes back to a capability already in it, or is longer than `max_depth` hops."""
    chain = [capability, fallback]
    while True:
        if chain[-1] in chain[:-1]:
            return f"the fallbacks loop: {' -> '.join(chain)}"
        if len(chain) - 1 > max_depth:
            return f"the fallback chain {' -> '.join(chain)} is longer than {max_depth} hops"
        following = fallback_of(chain[-1])
        if following is None:
            return None
        chain.append(following)


@dataclass(frozen=True, slots=True)
class Ask:
    """The status fold is to send the envelope at `at` (an inbox record) to `capability`."""

    capability: str
    at: tuple[str, int, int]


def parse_mark(text: str | None) -> FallbackRef | None:
    """The router's mark on an ending it sent a child for (`<capability> <child id>`, reach.kafka.headers)."""
    capability, _, message_id = (text or "").partition(" ")
    return FallbackRef(capability=capability, message_id=message_id) if capability and message_id else None


def mark(ref: FallbackRef) -> str:
    return f"{ref.capability} {ref.message_id}"


def settle(before: StatusRow | None, after: StatusRow, receipt: Receipt, *, routed_child: FallbackRef | None,
           fallback_of: Callable[[str], str | None]) -> tuple[StatusRow, Ask | None]:
    """The row with its fallback bookkeeping, and the child the fold sends (once per message and generation).

    The router's endings carry the child it sent (`routed_child`): the row records it. An agent's ending (the row
    names its agent) goes to the capability's fallback from the envelope the agent was handed (`envelope_at`); when
    no ROUTED said where that is yet, the row waits for it (`fallback_pending`). Only the generation's first ending
    counts: a replayed or later receipt never asks twice."""
    if receipt.generation != after.generation or not after.terminal or after.fallback is not None:
        return after, None
    newly = before is None or not before.terminal or before.generation != after.generation
    if newly and routed_child is not None:
        return after.model_copy(update={"fallback": routed_child}), None
    if newly and serves(after.status) and after.agent_id is not None:
        capability = fallback_of(after.capability)
        if capability is None:
            return after, None
        if after.envelope_at is None:
            return after.model_copy(update={"fallback_pending": True}), None
        return after, Ask(capability, after.envelope_at)
    if after.fallback_pending and after.envelope_at is not None:
        capability = fallback_of(after.capability)
        cleared = after.model_copy(update={"fallback_pending": False})
        return cleared, Ask(capability, after.envelope_at) if capability is not None else None
    return after, None


def sent(row: StatusRow, ask: Ask, outcome: dict[str, Any] | NotSent) -> StatusRow:
    """The row once the fold produced the child (or found it could not)."""
    ref = (FallbackRef(capability=ask.capability, note=outcome.reason) if isinstance(outcome, NotSent)
           else FallbackRef(capability=ask.capability, message_id=outcome["message_id"]))
    return row.model_copy(update={"fallback": ref, "fallback_pending": False})


def asked(before: StatusRow | None, after: StatusRow, receipt: Receipt, *, ask: str | None) -> StatusRow:
    """An ending the timekeeper or a delay tier decided (its receipt marked `ask`, the header FALLBACK_ASK: the
    producer that ended it) goes to the fallback as an agent's does: the row is marked `fallback_pending`, which
    `settle` then sends from the envelope at `envelope_at` (docs/decisions/0046). Only the generation's first ending
    and only when the row knows where an envelope of it is (else nothing would end the wait)."""
    if (not ask or not serves(after.status) or after.agent_id is not None or after.envelope_at is None
            or receipt.generation != after.generation or not after.terminal or after.fallback is not None):
        return after
    if before is not None and before.terminal and before.generation == after.generation:
        return after  # a replayed or later ending: asked once
    return after.model_copy(update={"fallback_pending": True})
