"""A request no instance can serve, handed to a human when its capability's policy says `handoff` (pure).

The router calls `outputs` in its NoRoute case instead of ending the message UNROUTABLE or DEAD_LETTERED:
the context bundle goes to `<ns>.handoff` (origin `router`), and an INTENT_RESOLVED receipt with stage
`handoff` says so, as the resolver writes for an intent nobody matched. The message then ends as a
resolver handoff does: a human's answer or re-route (`reach handoff resolve`), or its budget (EXPIRED).
Each instance that registers the capability is a candidate with the reason routing left it out (the
hard filters of reach.core.candidates.match, in the same order). Imports stay light: the router loads this.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from reach.core.candidates import RouteRequest, matching_capability
from reach.intent.handoff import HandoffCandidate, bundle, encode
from reach.intent.receipts import receipt
from reach.kafka import codec
from reach.kafka import headers as H
from reach.names import Names
from reach.records import AgentRegistration, AgentState, IntentCandidate, IntentResolution, Status

Record = tuple[str, bytes, bytes, H.Headers]  # topic, key, value, headers
ROUTER = "router"  # the resolution's `by` on a router handoff: `reach intents stats` counts these apart


def why_not(request: RouteRequest, reg: AgentRegistration, disabled: Collection[str]) -> str:
    """Why routing left this registration out for the request (the first hard filter it fails)."""
    if reg.state is not AgentState.READY:
        return f"instance is {reg.state}, not READY"
    if not reg.assigned_partitions or not reg.inbox_topic:
        return "instance owns no inbox partition (its consumer group is still assigning)"
    if reg.instance_id in disabled:
        return "drained or disabled by an operator (reach instances)"
    if reg.tenants and request.tenant not in reg.tenants:
        return f"serves tenants {', '.join(sorted(reg.tenants))}, not {request.tenant!r}"
    if request.to_agent and reg.agent_id != request.to_agent:
        return f"the request names agent {request.to_agent}"
    if matching_capability(reg, request.capability, request.serves_range) is None:
        versions = sorted(c.version for c in reg.capabilities if c.name == request.capability)
        return f"version {', '.join(versions)} does not satisfy {request.serves_range}"
    return "eligible when checked again: it became available after the router decided"


def rejections(request: RouteRequest, registrations: Iterable[AgentRegistration],
               disabled: Collection[str]) -> list[HandoffCandidate]:
    """Every live instance that registers the capability, with why it was rejected (score 0: none was scored)."""
    return [HandoffCandidate(capability=request.capability, score=0.0, source=reg.instance_id,
                             reason=why_not(request, reg, disabled)) for reg in registrations]


def outputs(envelope: dict[str, Any], raw: bytes, registrations: Iterable[AgentRegistration], *, why: str,
            disabled: Collection[str], names: Names, at: int) -> list[Record]:
    """The handoff record and its INTENT_RESOLVED receipt for an envelope the router found no route for."""
    request = RouteRequest.from_envelope(envelope)
    candidates = rejections(request, registrations, disabled)
    intent = envelope.get("intent") or ""
    record = bundle(envelope, raw, intent=intent, reason=why, candidates=candidates, at=at, origin="router",
                    capability=request.capability,
                    detail=f"router, attempt {request.attempt}, {request.reroutes} reroute(s): {why}; the policy of "
                           f"{request.capability} asks for a human")
    resolution = IntentResolution(stage="handoff", intent=intent or request.capability, by=ROUTER, candidates=[
        IntentCandidate(capability=c.capability, score=c.score, source=c.source, reason=c.reason)
        for c in candidates])
    done = receipt(envelope, Status.INTENT_RESOLVED, at, resolution=resolution)
    key = request.message_id.encode()
    reply = envelope.get("reply_to")
    headers: H.Headers = [(H.MESSAGE_ID, key), *([(H.REPLY_TO, reply.encode())] if reply else [])]
    return [(names.handoff, key, encode(record), []), (names.receipts, key, codec.encode(done), headers)]


class IntentHandoff:
    """The router's handoff port (`reach.streams.router.ports.Handoff`), passed in by the stream app's wiring."""

    enabled = True

    def outputs(self, envelope: dict[str, Any], raw: bytes, registrations: Iterable[AgentRegistration], *, why: str,
                disabled: Collection[str], names: Names, at: int) -> list[Record]:
        return outputs(envelope, raw, registrations, why=why, disabled=disabled, names=names, at=at)
