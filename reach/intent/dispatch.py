"""What the resolver produces for one intent envelope, pure: receipts, forwards, child messages, handoffs.

The worker (reach.streams.resolver.resolve_loop) encodes and produces these and commits the input offset once every
one is acknowledged, so a crash re-resolves, never skips (a repeated INTENT_RESOLVED is a duplicate step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from reach.intent import handoff as handoffs
from reach.intent.catalog import RESERVED
from reach.intent.receipts import receipt as receipt
from reach.intent.stages import Candidate, Resolution
from reach.intent.text import MAX_INTENT_CHARS
from reach.records import IntentCandidate, IntentResolution, Status

Kind = Literal["receipt", "forward", "child", "handoff"]
FORWARDED = frozenset({"exact", "semantic", "fuzzy"})  # stages that send the envelope on to one capability


@dataclass(frozen=True)
class Output:
    """One record to produce: to the receipts topic, a capability topic, or the handoff topic."""

    kind: Kind
    key: str
    value: Any  # a Receipt, an envelope dict, or a Handoff
    capability: str | None = None  # forward / child: the target capability


def problem(envelope: dict[str, Any]) -> str | None:
    """Why an envelope on the intents topic cannot be resolved (REJECTED), or None."""
    if envelope.get("capability") != RESERVED:
        return f"capability is {envelope.get('capability')!r}; envelopes on the intents topic name {RESERVED}"
    intent = envelope.get("intent")
    if not isinstance(intent, str) or not intent.strip():
        return f"an {RESERVED} envelope needs a non-empty `intent` (the request in words or an intent id)"
    if len(intent) > MAX_INTENT_CHARS:
        return f"intent is {len(intent):,} characters; the limit is {MAX_INTENT_CHARS:,}"
    return None


def resolution_record(resolution: Resolution, **fields: Any) -> IntentResolution:
    return IntentResolution(
        stage=fields.pop("stage", resolution.stage), intent=resolution.intent,
        capability=fields.pop("capability", resolution.capability),
        candidates=[_candidate(c) for c in resolution.candidates], **fields,
    )


def plan(envelope: dict[str, Any], raw: bytes, resolution: Resolution, *, at: int, reply_topic: str) -> list[Output]:
    """The outputs of one resolved envelope. A dual dispatch's children reply to `reply_topic` (the resolver's
    own), so the resolver sees the first valid answer and completes the request with it."""
    message_id = envelope["message_id"]
    done = receipt(envelope, Status.INTENT_RESOLVED, at, resolution=resolution_record(resolution))
    outputs = [Output("receipt", message_id, done)]
    if resolution.stage in FORWARDED:
        assert resolution.capability is not None
        forward = {**envelope, "capability": resolution.capability}
        outputs.append(Output("forward", message_id, forward, resolution.capability))
    elif resolution.stage == "dual":
        assert resolution.dual is not None
        for i, capability in enumerate(resolution.dual):
            child = {**envelope, "message_id": child_id(envelope, i), "parent_id": message_id, "capability": capability,
                     "reply_to": reply_topic, "callback": None, "idempotency_key": None, "generation": 0}
            outputs.append(Output("child", child["message_id"], child, capability))
    else:
        outputs.append(Output("handoff", message_id, handoff_record(envelope, raw, resolution, at=at)))
    return outputs


def child_id(envelope: dict[str, Any], branch: int) -> str:
    """A dual branch's message_id, derived from the request's: resolving the same request again (its input
    read again after a failed write) yields the same children, never a second pair that could complete it."""
    return f"{envelope['message_id']}.g{envelope.get('generation', 0)}.dual{branch}"


def handoff_record(envelope: dict[str, Any], raw: bytes, resolution: Resolution, *, at: int) -> handoffs.Handoff:
    """The context bundle: the request, the trace so far, the candidates and why each was rejected."""
    return handoffs.bundle(
        envelope, raw, intent=resolution.intent, reason=resolution.note or "no capability matched",
        candidates=[handoffs.HandoffCandidate(capability=c.capability, score=c.score, source=c.source,
                                              reason=c.reason) for c in resolution.candidates],
        detail=f"stage handoff: {resolution.note}", at=at)


def answer_result(answer: str) -> bytes:
    """An operator's --answer as the result bytes: JSON as given, else the text as a JSON string."""
    try:
        json.loads(answer)
        return answer.encode()
    except ValueError:
        return json.dumps(answer).encode()


def _candidate(c: Candidate) -> IntentCandidate:
    return IntentCandidate(capability=c.capability, score=c.score, source=c.source, reason=c.reason)
