"""The capability catalog the resolver matches against, derived from live registrations.

Per capability: its description (the input schema's JSON Schema `description`, else its `title`), tags,
example phrases (examples that are JSON strings; the string values of object examples) and its name
read as words; plus whether it declares itself free of side effects (the tag `side-effect-free`).
Registrations carry no other description, so this is the one place that reads them for intents.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reach.intent.text import family, normalize, phrase_of_name
from reach.records import AgentRegistration, Capability

SIDE_EFFECT_FREE_TAG = "side-effect-free"
GENERIC_TAG = "generic"  # the family's generic capability: the fuzzy stage merges unplaced requests into it
FAMILY_TAG = "family:"  # `family:<name>` puts a capability in a family other than its name's first segment
MARKER_TAGS = frozenset({SIDE_EFFECT_FREE_TAG, GENERIC_TAG})  # about the capability, not what it does
CHANNEL_PREFIX = "channel."
RESERVED = "intent.resolve"  # the capability an envelope names when it carries an intent instead


@dataclass
class CatalogEntry:
    """What the semantic stage knows of one capability: the texts that describe it."""

    capability: str
    texts: list[str] = field(default_factory=list)
    side_effect_free: bool = False
    generic: bool = False
    family: str = ""  # the fuzzy stage's unit (reach.intent.text.family unless a `family:` tag names one)

    def __post_init__(self) -> None:
        self.family = self.family or family(self.capability)

    def add(self, text: str) -> None:
        if text and text not in self.texts:
            self.texts.append(text)


def describe(capability: Capability) -> str | None:
    """The capability's description from its input schema, if it declares one."""
    try:
        schema = json.loads(capability.input_schema or "{}")
    except ValueError:
        return None
    if not isinstance(schema, dict):
        return None
    for key in ("description", "title"):
        value = schema.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def example_phrases(capability: Capability) -> list[str]:
    """Examples that read as words: a JSON string example is a phrase; an object's string values are one."""
    phrases = []
    for raw in capability.examples:
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(value, str):
            phrases.append(value)
        elif isinstance(value, dict):
            words = " ".join(v for v in value.values() if isinstance(v, str))
            if words:
                phrases.append(words)
    return [p.strip() for p in phrases if p.strip()]


def build(registrations: Iterable[AgentRegistration]) -> dict[str, CatalogEntry]:
    """One entry per capability any live instance serves. Never a target: intent.resolve itself, and the
    channels (`channel.*` posts wherever its payload says: only an app allowed it by name may call one, and an
    intent would let any caller reach it)."""
    entries: dict[str, CatalogEntry] = {}
    named: dict[str, set[str]] = {}  # capability -> the families its `family:` tags name
    for reg in registrations:
        for cap in reg.capabilities:
            if cap.name == RESERVED or cap.name.startswith(CHANNEL_PREFIX):
                continue
            entry = entries.setdefault(cap.name, CatalogEntry(cap.name))
            desc = describe(cap)
            if desc:
                entry.add(desc)
            for phrase in example_phrases(cap):
                entry.add(phrase)
            entry.add(phrase_of_name(cap.name))
            tags = [t for t in cap.tags if t not in MARKER_TAGS and not t.startswith(FAMILY_TAG)]
            tagged = (t[len(FAMILY_TAG):].strip() for t in cap.tags if t.startswith(FAMILY_TAG))
            named.setdefault(cap.name, set()).update(f for f in tagged if f)
            if tags:
                entry.add(" ".join(tags))
            if SIDE_EFFECT_FREE_TAG in cap.tags:
                entry.side_effect_free = True
            if GENERIC_TAG in cap.tags:
                entry.generic = True
    for name, families_named in named.items():
        if families_named:  # instances that disagree: the first name, so every resolver places it alike
            entries[name].family = min(families_named)
    return entries


def generics(entries: dict[str, CatalogEntry]) -> dict[str, str]:
    """Family (the name's first segment, or its `family:` tag) -> its generic capability; a family with two
    generics has none (which one is meant is not known, so the fuzzy stage hands such requests off)."""
    found: dict[str, list[str]] = {}
    for entry in entries.values():
        if entry.generic:
            found.setdefault(entry.family, []).append(entry.capability)
    return {fam: caps[0] for fam, caps in found.items() if len(caps) == 1}


def families(entries: dict[str, CatalogEntry]) -> dict[str, str]:
    """Capability -> its family, for the fuzzy stage."""
    return {name: entry.family for name, entry in entries.items()}


def tenancy(registrations: Iterable[AgentRegistration]) -> dict[str, frozenset[str] | None]:
    """Per capability the tenants its live instances serve; None when one serves every tenant (no `tenants`)."""
    every: set[str] = set()
    some: dict[str, set[str]] = {}
    for reg in registrations:
        for cap in reg.capabilities:
            if reg.tenants:
                some.setdefault(cap.name, set()).update(reg.tenants)
            else:
                every.add(cap.name)
    return {**{name: frozenset(tenants) for name, tenants in some.items()}, **dict.fromkeys(every)}


def served(catalog: Iterable[str], tenancy_: dict[str, frozenset[str] | None], tenant: str) -> frozenset[str]:
    """The catalog's capabilities a live instance serves for `tenant`, as the router filters (an instance with
    no `tenants` serves all): an intent must never resolve to a capability that would end UNROUTABLE."""
    return frozenset(c for c in catalog if (t := tenancy_.get(c, frozenset())) is None or tenant in t)


def seeds(entries: dict[str, CatalogEntry]) -> dict[str, str]:
    """The cold-start exact map: every catalog text (normalised) and the capability name -> its capability.
    A text two capabilities share is ambiguous and seeds neither."""
    found: dict[str, set[str]] = {}
    for entry in entries.values():
        for text in (*entry.texts, entry.capability):
            found.setdefault(normalize(text), set()).add(entry.capability)
    return {phrase: next(iter(caps)) for phrase, caps in found.items() if phrase and len(caps) == 1}
