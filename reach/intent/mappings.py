"""The exact map: INTENT control records (operator and handoff mappings) over the seeds from registrations, and
each tenant's learned confidences (INTENT_FEEDBACK records, docs/decisions/0026 addendum).

An operator's (or a handoff's) mapping holds for every tenant and only an operator replaces it. What the resolver
learns from outcomes is a separate record per tenant and phrase, in its own key space, that lowers the mapping's
confidence for that tenant alone: a caller can wear down at most its own tenant's use of a mapping.
"""

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
FEEDBACK = "feedback"  # the source of what the resolver learned from outcomes


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


def feedback_record(tenant: str, phrase: str, capability: str, *, confidence: float, by: str) -> Control:
    """One tenant's learned confidence in the mapping phrase -> capability: an INTENT_FEEDBACK record keyed
    `INTENT_FEEDBACK:<tenant>:<phrase>`, never the operator's `INTENT:<phrase>`."""
    key = normalize(phrase)
    return Control(kind=ControlKind.INTENT_FEEDBACK, scope=feedback_scope(tenant, key),
                   intent=IntentMapping(phrase=key, capability=capability, confidence=round(confidence, 4),
                                        source=FEEDBACK, tenant=tenant),
                   updated_at=now_ms(), updated_by=by)


def feedback_scope(tenant: str, phrase: str) -> str:
    """`<tenant>:<phrase>`, the tenant's `%` and `:` escaped so that no two (tenant, phrase) share a key."""
    return f"{tenant.replace('%', '%25').replace(':', '%3A')}:{phrase}"


def tombstone_key(phrase: str) -> str:
    return f"{ControlKind.INTENT}:{normalize(phrase)}"


def feedback_keys(phrase: str, records: Mapping[str, Control]) -> list[str]:
    """The keys of every tenant's learned confidence in the phrase's mapping (removed with the mapping)."""
    key = normalize(phrase)
    return sorted(k for k, c in records.items()
                  if c.kind is ControlKind.INTENT_FEEDBACK and c.intent is not None and c.intent.phrase == key)


def operator_map(records: Mapping[str, Control]) -> dict[str, IntentMapping]:
    """The INTENT records of a control view, by phrase: the operator's and handoffs' mappings. A record of source
    `feedback` under an INTENT key was written by a resolver from before tenant-scoped feedback (it replaced the
    mapping for everyone): it is not the operator's word and is left out, so the phrase falls back to its seed."""
    return {c.intent.phrase: c.intent for c in records.values()
            if c.kind is ControlKind.INTENT and c.intent is not None and c.intent.source != FEEDBACK}


def exact_map(seeds: Mapping[str, str], records: Mapping[str, Control]) -> dict[str, Mapping_]:
    """Seeds first, then the control topic's mappings (an operator's or a handoff's word wins over a seed)."""
    merged = {phrase: Mapping_(capability, SEED_CONFIDENCE) for phrase, capability in seeds.items()}
    for phrase, mapping in operator_map(records).items():
        merged[phrase] = Mapping_(mapping.capability, mapping.confidence)
    return merged


def learned_map(exact: Mapping[str, Mapping_], records: Mapping[str, Control]) -> dict[str, dict[str, Mapping_]]:
    """Per tenant, the phrases whose confidence that tenant's outcomes lowered. A learned confidence applies only
    while the mapping it was learned on stands: the same capability, and no operator record written after it (an
    operator who sets a phrase again restores it for every tenant)."""
    written = {c.intent.phrase: c.updated_at for c in records.values()
               if c.kind is ControlKind.INTENT and c.intent is not None and c.intent.source != FEEDBACK}
    learned: dict[str, dict[str, Mapping_]] = {}
    for c in records.values():
        mine = c.intent
        if c.kind is not ControlKind.INTENT_FEEDBACK or mine is None or mine.tenant is None:
            continue
        base = exact.get(mine.phrase)
        if base is None or base.capability != mine.capability or c.updated_at < written.get(mine.phrase, 0):
            continue
        learned.setdefault(mine.tenant, {})[mine.phrase] = Mapping_(mine.capability, min(mine.confidence,
                                                                                         base.confidence))
    return learned


def learned_rows(records: Mapping[str, Control]) -> list[IntentMapping]:
    """Every tenant's learned confidences on the control topic (for listings), by tenant then phrase."""
    return sorted((c.intent for c in records.values()
                   if c.kind is ControlKind.INTENT_FEEDBACK and c.intent is not None and c.intent.tenant is not None),
                  key=lambda m: (str(m.tenant), m.phrase))
