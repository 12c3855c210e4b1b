"""Handoff records: what a human needs to answer a request nobody could serve (JSON on `<ns>.handoff`).

Keyed by message_id on a compacted topic, the latest record per message is its state: OPEN (the resolver
or a router wrote it with the context bundle), TAKEN (an operator claimed it), ANSWERED (the operator's
answer completed the message) or REROUTED (sent on to a capability, which also taught the exact map).
`version` counts the moves: a move is claimed from the version it was read at (reach.intent.claims), so
of two operators moving the same handoff at once one wins and the other is told.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reach.intent.errors import IntentError

State = Literal["OPEN", "TAKEN", "ANSWERED", "REROUTED"]
Origin = Literal["resolver", "router"]
_NEXT: dict[str, set[str]] = {"OPEN": {"TAKEN", "ANSWERED", "REROUTED"}, "TAKEN": {"TAKEN", "ANSWERED", "REROUTED"}}


class HandoffCandidate(BaseModel):
    """A capability the resolver considered, and why it was rejected."""

    model_config = ConfigDict(frozen=True)

    capability: str
    score: float
    source: str
    reason: str | None = None


class TraceStep(BaseModel):
    """One step of the message so far."""

    model_config = ConfigDict(frozen=True)

    status: str
    at: int
    detail: str = ""


class Handoff(BaseModel):
    """The context bundle for one request, with its handoff state."""

    model_config = ConfigDict(frozen=True)

    message_id: str
    generation: int = 0
    trace_id: str
    tenant: str
    intent: str  # the request's words; empty for a router handoff of an envelope that named a capability
    reason: str
    origin: Origin = "resolver"  # router: no instance served the capability and its policy asks for a human
    capability: str | None = None  # a router handoff: the capability nobody served
    envelope: str  # the original envelope's bytes, base64: re-routing sends them on unchanged but the capability
    candidates: list[HandoffCandidate] = []
    trace: list[TraceStep] = []
    session_snapshot: str | None = None
    payload_preview: str = ""
    state: State = "OPEN"
    taken_by: str | None = None
    resolved_by: str | None = None
    resolution: str | None = None  # the answer (JSON text) or the capability it was re-routed to
    at: int
    updated_at: int
    version: int = 0  # moves so far (OPEN is 0)

    def envelope_bytes(self) -> bytes:
        return base64.b64decode(self.envelope)

    def moved(self, state: State, *, by: str, at: int, resolution: str | None = None) -> Handoff:
        """This handoff in its next state, or IntentError when the move is not allowed (e.g. answered twice)."""
        if state not in _NEXT.get(self.state, set()):
            raise IntentError(f"Handoff {self.message_id} is {self.state}; it cannot become {state}. "
                              "Run `reach handoff ls` to see the open ones.")
        if state == "TAKEN" and self.state == "TAKEN" and self.taken_by != by:
            raise IntentError(f"Handoff {self.message_id} is already taken by {self.taken_by}; "
                              f"resolve it as {self.taken_by} or ask them to hand it over.")
        changes: dict[str, Any] = {"state": state, "updated_at": at, "version": self.version + 1}
        if state == "TAKEN":
            changes["taken_by"] = by
        else:
            changes.update(resolved_by=by, resolution=resolution)
        return self.model_copy(update=changes)


def bundle(envelope: dict[str, Any], raw: bytes, *, intent: str, reason: str, candidates: list[HandoffCandidate],
           detail: str, at: int, origin: Origin = "resolver", capability: str | None = None) -> Handoff:
    """The context bundle of a decoded envelope: the request, the trace so far (created, then the step that
    handed it off with `detail`), the candidates and why each was rejected, the session snapshot."""
    payload = envelope.get("payload") or b""
    preview = payload[:500].decode(errors="replace") if isinstance(payload, bytes) else str(payload)[:500]
    return Handoff(
        message_id=envelope["message_id"], generation=envelope.get("generation", 0), trace_id=envelope["trace_id"],
        tenant=envelope["tenant"], intent=intent, reason=reason, origin=origin, capability=capability,
        envelope=envelope_text(raw), candidates=candidates,
        trace=[TraceStep(status="CREATED", at=envelope.get("created_at", at),
                         detail=f"from {envelope.get('source', '?')}"),
               TraceStep(status="INTENT_RESOLVED", at=at, detail=detail)],
        session_snapshot=envelope.get("session_snapshot"), payload_preview=preview, at=at, updated_at=at,
    )


def encode(record: Handoff) -> bytes:
    return record.model_dump_json().encode()


def decode(value: bytes) -> Handoff:
    return Handoff.model_validate_json(value)


def envelope_text(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
