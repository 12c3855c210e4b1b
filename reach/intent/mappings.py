"""The exact map: INTENT control records (operator and handoff mappings) over the seeds from registrations."""

from __future__ import annotations

from collections.abc import Mapping

from reach.envelopes import now_ms
from reach.intent.catalog import RESERVED
from reach.intent.errors import IntentError
from reach.intent.stages import Mapping_
from reach.intent.text import normalize
from reach.names import check_capability
from reach.records import Control, ControlKind, IntentMapping

SEED_CONFIDENCE = 1.0


def record(phrase: str, capability: str, *, confidence: float = 1.0, source: str = "operator",
           by: str = "reach-cli") -> Control:
    """The INTENT control record mapping a phrase (normalised) to a capability; IntentError when invalid."""
    key = normalize(phrase)
    if not key:
        raise IntentError("The intent phrase is empty after normalising; give the words or intent id to map.")
    if capability == RESERVED:
        raise IntentError(f"{RESERVED} cannot be a mapping's target: name the capability that serves the intent.")
    check_capability(capability)
    if not 0.0 <= confidence <= 1.0:
        raise IntentError(f"confidence must be between 0 and 1; got {confidence}")
    return Control(kind=ControlKind.INTENT, scope=key,
                   intent=IntentMapping(phrase=key, capability=capability, confidence=confidence, source=source),
                   updated_at=now_ms(), updated_by=by)


def tombstone_key(phrase: str) -> str:
    return f"{ControlKind.INTENT}:{normalize(phrase)}"


def operator_map(records: Mapping[str, Control]) -> dict[str, IntentMapping]:
    """The INTENT records of a control view, by phrase."""
    return {c.intent.phrase: c.intent for c in records.values()
            if c.kind is ControlKind.INTENT and c.intent is not None}


def exact_map(seeds: Mapping[str, str], records: Mapping[str, Control]) -> dict[str, Mapping_]:
    """Seeds first, then the control topic's mappings (an operator's or a handoff's word wins over a seed)."""
    merged = {phrase: Mapping_(capability, SEED_CONFIDENCE) for phrase, capability in seeds.items()}
    for phrase, mapping in operator_map(records).items():
        merged[phrase] = Mapping_(mapping.capability, mapping.confidence)
    return merged
