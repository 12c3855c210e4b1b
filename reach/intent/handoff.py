"""Handoff records: what a human needs to answer a request nobody could serve (JSON on `<ns>.handoff`).

Keyed by message_id on a compacted topic, the latest record per message is its state: OPEN (the resolver
or a router wrote it with the context bundle), TAKEN (an operator claimed it), ANSWERED (the operator's
answer completed the message) or REROUTED (sent on to a capability, which also taught the exact map).
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from reach.intent.errors import IntentError

State = Literal["OPEN", "TAKEN", "ANSWERED", "REROUTED"]
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
    intent: str
    reason: str
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
        changes: dict[str, Any] = {"state": state, "updated_at": at}
        if state == "TAKEN":
            changes["taken_by"] = by
        else:
            changes.update(resolved_by=by, resolution=resolution)
        return self.model_copy(update=changes)


def encode(record: Handoff) -> bytes:
    return record.model_dump_json().encode()


def decode(value: bytes) -> Handoff:
    return Handoff.model_validate_json(value)


def envelope_text(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
