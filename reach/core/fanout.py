"""Fan-out (pure): a capability served in `subscribe` mode delivers every event to every subscribing agent.

Each subscribing agent id is one consumer group (its instances share the work). The router turns an event on such
a capability (the parent) into one delivery per subscriber: a child envelope with a derived id
`<message_id>-s<generation>-<agent path, '/' as '.'>`, `to_agent` the subscriber and the header `reach-fanout-of`,
produced to the capability's topic and routed there as an ordinary request of that one agent, with its own receipts,
retries and dead letters. The parent's row collects how each delivery ended (FANNED_OUT receipts, Receipt v10) and
ends when all have: COMPLETED when every delivery completed, else FAILED naming those that did not
(docs/decisions/0040).

A capability is served in one mode (docs/decisions/0076): when some agent handles it, each request ends by one
handler, and the agents subscribing to it beside the handlers are notified observers: each gets a notification, a
child envelope `<message_id>-n<generation>-<agent path>` (header `reach-notify-of`), routed to that agent alone
with its own receipts, retries and dead letter, whose ending never touches the request's. Only when no agent handles
it is a request an event that fans out and ends when every delivery has. Either way a subscriber's filter
(reach.core.eventfilter) picks the events it gets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from reach.core.candidates import matching_capability
from reach.core.eventfilter import Event
from reach.records import (
    AgentRegistration,
    AgentState,
    CapabilityMode,
    ErrorInfo,
    FanOut,
    FanOutDelivery,
    Receipt,
    Status,
)

if TYPE_CHECKING:
    from reach.core.lifecycle import StatusRow

OF_HEADER = "reach-fanout-of"  # Envelope.headers of a delivery: the parent's message id
NOTIFY_HEADER = "reach-notify-of"  # Envelope.headers of a notification: the request its subscriber observes
INCOMPLETE = "FANOUT_INCOMPLETE"  # ErrorInfo.code of a parent some of whose deliveries did not complete
MAX_DELIVERIES = 256
"""Subscribers one event reaches at most (the row lists each): agents beyond it (by agent id) are not delivered to."""


class Delivery(BaseModel):
    """One delivery of a fan-out as the parent's row keeps it."""

    model_config = ConfigDict(frozen=True)

    agent_id: str
    message_id: str
    status: Status | None = None  # how it ended (None: not yet)
    at: int | None = None  # when it ended
    error: ErrorInfo | None = None  # why it did not complete


class FanOutRow(BaseModel):
    """A fan-out on a status row: a parent's deliveries (`deliveries`, all named once the router's FANNED_OUT is
    folded: `announced`; `settled` once the fold produced the parent's ending), or on a delivery its parent (`of`,
    and `reported`: this generation's ending went to the parent)."""

    model_config = ConfigDict(frozen=True)

    deliveries: tuple[Delivery, ...] = ()
    announced: bool = False
    settled: bool = False
    of: str | None = None
    reported: bool = False

    @property
    def pending(self) -> tuple[Delivery, ...]:
        return tuple(d for d in self.deliveries if d.status is None)


# -- the router's side ------------------------------------------------------------------------------------------


def mode_of(registration: AgentRegistration, capability: str) -> CapabilityMode | None:
    """The mode this registration serves `capability` in (None: it does not serve it)."""
    for cap in registration.capabilities:
        if cap.name == capability:
            return cap.mode
    return None


@dataclass(frozen=True, slots=True)
class Split:
    """The live registrations of one capability by mode: `handlers` serve requests (one of them each); `subscribers`
    (by agent id) get every event that passes their filter: all of a fan-out when no agent handles the capability,
    notifications beside the handlers when one does."""

    handlers: tuple[AgentRegistration, ...] = ()
    subscribers: Mapping[str, tuple[AgentRegistration, ...]] = field(default_factory=dict)

    @property
    def fans_out(self) -> bool:
        return not self.handlers and bool(self.subscribers)

    @property
    def observed(self) -> bool:
        """Handlers serve it and subscribers beside them are notified."""
        return bool(self.handlers) and bool(self.subscribers)


def split(capability: str, registrations: Iterable[AgentRegistration]) -> Split:
    """Split the registrations that serve `capability` by the mode they serve it in."""
    handlers: list[AgentRegistration] = []
    subscribing: dict[str, list[AgentRegistration]] = {}
    for reg in registrations:
        mode = mode_of(reg, capability)
        if mode is CapabilityMode.SUBSCRIBE:
            subscribing.setdefault(reg.agent_id, []).append(reg)
        elif mode is not None:
            handlers.append(reg)
    return Split(handlers=tuple(handlers), subscribers={agent: tuple(regs) for agent, regs in subscribing.items()})


def is_delivery(envelope: Mapping[str, Any]) -> bool:
    """Whether this envelope is one delivery of a fan-out (routed to its one agent, never fanned out again)."""
    return parent_of(envelope) is not None


def parent_of(envelope: Mapping[str, Any]) -> str | None:
    """The parent a delivery reports to: the OF_HEADER's message id, only when the envelope's own id is the delivery
    id derived from it for its `to_agent` (what the router made). A header anyone else set names nothing."""
    return verified_parent(str(envelope.get("message_id") or ""), envelope.get("to_agent"),
                           (envelope.get("headers") or {}).get(OF_HEADER))


def verified_parent(message_id: str, to_agent: str | None, parent: str | None) -> str | None:
    """`parent` when `message_id` is `delivery_id(parent, generation, to_agent)` for some generation, else None."""
    if not parent or not to_agent or not derived_from(message_id, parent):
        return None
    return parent if message_id == delivery_id(parent, _parent_generation(message_id, parent), to_agent) else None


def derived_from(message_id: str, parent: str) -> bool:
    """Whether `message_id` has the form of a delivery id of `parent` (`<parent>-s<generation>-<agent path>`)."""
    head = f"{parent}-s"
    if not parent or not message_id.startswith(head):
        return False
    digits, dash, path = message_id[len(head):].partition("-")
    return digits.isdigit() and bool(dash) and bool(path)


def subscribers(envelope: Mapping[str, Any], parts: Split, *, observing: bool = False) -> list[str]:
    """The agents this event goes to: those with a READY instance that serves the capability in a version of the
    envelope's range for its tenant and whose filter it passes (a subscriber that registers later gets the events
    routed after it is READY), only `to_agent` when the caller named one for a fan-out (`observing`: subscribers
    beside the handlers are notified whichever handler the caller named), sorted, at most MAX_DELIVERIES."""
    capability, tenant = envelope["capability"], envelope.get("tenant") or ""
    version_range = envelope.get("capability_version") or "*"
    only = None if observing else envelope.get("to_agent")
    event = Event(envelope)
    found = []
    for agent, regs in parts.subscribers.items():
        if only and agent != only:
            continue
        for r in regs:
            if r.state is not AgentState.READY or (r.tenants and tenant not in r.tenants):
                continue
            cap = matching_capability(r, capability, version_range)
            if cap is not None and event.passes(cap.filter):
                found.append(agent)
                break
    return sorted(found)[:MAX_DELIVERIES]


def notification_id(message_id: str, generation: int, agent_id: str) -> str:
    """A notification's message id: derived (as a delivery's), with `-n` where a delivery has `-s`."""
    path = agent_id.removeprefix("agent://").replace("/", ".")
    return f"{message_id}-n{generation}-{path}"


def notification(envelope: Mapping[str, Any], agent_id: str, *, share: int = 1) -> dict[str, Any]:
    """The child envelope notifying the subscriber `agent_id` of the request `envelope` that a handler serves: a
    delivery (same payload, trace, deadline, the budget split among the `share` notifications, no reply_to or
    callback) that reports to nobody: the request's row ends by its handler, the notification's own row by the
    subscriber."""
    child = delivery(envelope, agent_id, share=share)
    headers = {k: v for k, v in child["headers"].items() if k != OF_HEADER}
    headers[NOTIFY_HEADER] = envelope["message_id"]
    return {**child, "message_id": notification_id(envelope["message_id"], envelope.get("generation") or 0, agent_id),
            "headers": headers}


def is_notification(envelope: Mapping[str, Any]) -> bool:
    """Whether this envelope is a notification the router made (its id derived from the request the header names,
    for its `to_agent`): routed to that one agent, queued rather than shed, never notified again."""
    return notified_of(str(envelope.get("message_id") or ""), envelope.get("to_agent"),
                       (envelope.get("headers") or {}).get(NOTIFY_HEADER)) is not None


def notified_of(message_id: str, to_agent: str | None, parent: str | None) -> str | None:
    """`parent` when `message_id` is `notification_id(parent, generation, to_agent)` for some generation, else None."""
    head = f"{parent}-n"
    if not parent or not to_agent or not message_id.startswith(head):
        return None
    digits = message_id[len(head):].split("-", 1)[0]
    return parent if digits.isdigit() and message_id == notification_id(parent, int(digits), to_agent) else None


def delivery_id(message_id: str, generation: int, agent_id: str) -> str:
    """A delivery's message id: derived, so a batch read again produces the same message (the agent lease runs it
    once), and a replay of the parent (a new generation) its own deliveries."""
    path = agent_id.removeprefix("agent://").replace("/", ".")
    return f"{message_id}-s{generation}-{path}"


def delivery(envelope: Mapping[str, Any], agent_id: str, *, share: int = 1) -> dict[str, Any]:
    """The child envelope (an Avro dict) delivering the event `envelope` to the subscribing agent `agent_id`: same
    payload, trace, deadline and caller's asks (the caller's `created_at` kept, so it is the same bytes however
    often it is made); no reply_to and no callback (the parent answers once, when every delivery ended); an
    idempotency key of the event is the subscriber's own (`<key> <agent id>`); a budget (`max_tokens`,
    `max_cost_micros`) split evenly among the `share` deliveries, so together they cannot spend more than the event
    may (docs/decisions/0045)."""
    parent = envelope["message_id"]
    return {
        **envelope,
        "message_id": delivery_id(parent, envelope.get("generation") or 0, agent_id),
        "parent_id": parent,
        "to_agent": agent_id,
        "reply_to": None,
        "callback": None,
        "schema_version": None,
        "attempt": 1,
        "generation": 0,
        "reroutes": 0,
        "excluded_instances": [],
        "headers": {**(envelope.get("headers") or {}), OF_HEADER: parent},
        # business idempotency is per tenant and capability: each subscriber keeps its own key
        "idempotency_key": f"{key} {agent_id}" if (key := envelope.get("idempotency_key")) else None,
        **{name: budget // max(1, share) for name in ("max_tokens", "max_cost_micros")
           if isinstance(budget := envelope.get(name), int)},
    }


def announced(agents: Sequence[str], message_id: str, generation: int) -> FanOut:
    """The FANNED_OUT receipt's deliveries, as the router sends them."""
    return FanOut(deliveries=[FanOutDelivery(agent_id=a, message_id=delivery_id(message_id, generation, a))
                              for a in agents])


# -- the status fold's side --------------------------------------------------------------------------------------


def track(book: FanOutRow | None, receipt: Mapping[str, Any]) -> FanOutRow:
    """A row's fan-out after a FANNED_OUT receipt of its generation (the receipt as a dict): the router's names every
    delivery, the fold's says how one ended (a delivery's later generation, a replay, updates it)."""
    book = book or FanOutRow()
    error = None if receipt["error"] is None else ErrorInfo.model_validate(receipt["error"])
    ends = {d.message_id: d for d in book.deliveries}
    named = FanOut.model_validate(receipt["fanout"]).deliveries
    for d in named:
        known = ends.get(d.message_id)
        agent = known.agent_id if known is not None else d.agent_id
        if d.status is None:
            ends[d.message_id] = known or Delivery(agent_id=agent, message_id=d.message_id)
        else:
            ends[d.message_id] = Delivery(agent_id=agent, message_id=d.message_id, status=d.status,
                                          at=receipt["at"], error=error)
    is_router = all(d.status is None for d in named)
    deliveries = tuple(sorted(ends.values(), key=lambda d: d.agent_id))
    return book.model_copy(update={"deliveries": deliveries, "announced": book.announced or is_router})


def settle(after: StatusRow, receipt: Receipt, *, parent: str | None) -> tuple[StatusRow, Receipt | None]:
    """The row with its fan-out bookkeeping, and the receipt the fold produces (at most one):

    - on a delivery (`parent` from the router's `x-reach-fanout-of` header, or learned before) whose generation has
      ended, once: a FANNED_OUT receipt for the parent saying how it ended (the agent's ending can be folded before
      the router's ROUTED that names the parent: it is sent when that arrives);
    - on a parent whose deliveries have all ended and that is still open, once: its ending, COMPLETED when every
      delivery completed, else FAILED naming those that did not. Its `at` is the last delivery's ending, so a batch
      read again produces the same receipt (an exact duplicate the fold ignores)."""
    row = after
    if parent and not derived_from(row.message_id, parent):
        parent = None  # the router names only a delivery's own parent; anything else is not followed
    if parent and (row.fanout is None or row.fanout.of is None):
        row = row.model_copy(update={"fanout": (row.fanout or FanOutRow()).model_copy(update={"of": parent})})
    book = row.fanout
    if book is None:
        return row, None
    if book.of and row.terminal and not book.reported and receipt.generation == row.generation:
        row = row.model_copy(update={"fanout": book.model_copy(update={"reported": True})})
        return row, _ended(row, book.of)
    if book.announced and not book.settled and not book.pending and book.deliveries and not row.terminal:
        row = row.model_copy(update={"fanout": book.model_copy(update={"settled": True})})
        return row, _parent_ending(row, book)
    return row, None


def foreign(row: StatusRow | None, receipt: Receipt) -> str | None:
    """Why the status fold drops a FANNED_OUT receipt instead of folding it into `row` (None: it folds it): one of
    its deliveries is not an id derived from the message it names, or the row belongs to another tenant. A forged
    delivery's ending can then neither take over another message's row nor end another tenant's fan-out."""
    if receipt.status is not Status.FANNED_OUT or receipt.fanout is None:
        return None
    for d in receipt.fanout.deliveries:
        if not derived_from(d.message_id, receipt.message_id):
            return f"delivery {d.message_id[:120]!r} is not a delivery of {receipt.message_id[:120]!r}"
    if row is not None and row.tenant != receipt.tenant:
        return f"it comes from tenant {receipt.tenant[:60]!r}, the row is tenant {row.tenant[:60]!r}'s"
    return None


def _ended(row: StatusRow, parent: str) -> Receipt:
    """The FANNED_OUT receipt telling the parent how the delivery `row` ended (the parent knows the delivery by its
    message id; the agent is the one that ended it, empty for the router's endings)."""
    return Receipt(message_id=parent, generation=_parent_generation(row.message_id, parent), trace_id=row.trace_id,
                   tenant=row.tenant, capability=row.capability, agent_id=row.agent_id, status=Status.FANNED_OUT,
                   at=row.terminal_at or row.updated_at,
                   error=row.last_error if row.status is not Status.COMPLETED else None,
                   fanout=FanOut(deliveries=[FanOutDelivery(agent_id=row.agent_id or "", message_id=row.message_id,
                                                            status=row.status)]))


def _parent_generation(message_id: str, parent: str) -> int:
    """The parent's generation a delivery belongs to, from its id (`<parent>-s<generation>-<path>`)."""
    head = f"{parent}-s"
    digits = message_id[len(head):].split("-", 1)[0] if message_id.startswith(head) else ""
    return int(digits) if digits.isdigit() else 0


def _parent_ending(row: StatusRow, book: FanOutRow) -> Receipt:
    missed = [d for d in book.deliveries if d.status is not Status.COMPLETED]
    at = max((d.at or row.updated_at) for d in book.deliveries)
    error = None
    if missed:
        names = ", ".join(f"{d.agent_id} {d.status.value if d.status else 'open'}" for d in missed)
        error = ErrorInfo(kind="FANOUT", code=INCOMPLETE,
                          message=f"{len(missed)} of {len(book.deliveries)} deliveries did not complete: {names}")
    return Receipt(message_id=row.message_id, generation=row.generation, trace_id=row.trace_id, tenant=row.tenant,
                   capability=row.capability, status=Status.FAILED if missed else Status.COMPLETED, at=at,
                   attempt=row.attempt, deadline=row.deadline, callback=row.callback, error=error)


def summary(book: FanOutRow) -> str:
    """One line for a terminal: `2/3 completed (agent://demo/notify DEAD_LETTERED)`."""
    done = sum(1 for d in book.deliveries if d.status is Status.COMPLETED)
    others = [f"{d.agent_id} {d.status.value if d.status else 'open'}" for d in book.deliveries
              if d.status is not Status.COMPLETED]
    return f"{done}/{len(book.deliveries)} completed" + (f" ({', '.join(others)})" if others else "")
