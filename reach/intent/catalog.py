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

from reach.intent.text import normalize, phrase_of_name
from reach.records import AgentRegistration, Capability

SIDE_EFFECT_FREE_TAG = "side-effect-free"
CHANNEL_PREFIX = "channel."
RESERVED = "intent.resolve"  # the capability an envelope names when it carries an intent instead


@dataclass
class CatalogEntry:
    """What the semantic stage knows of one capability: the texts that describe it."""

    capability: str
    texts: list[str] = field(default_factory=list)
    side_effect_free: bool = False

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
            tags = [t for t in cap.tags if t != SIDE_EFFECT_FREE_TAG]
            if tags:
                entry.add(" ".join(tags))
            if SIDE_EFFECT_FREE_TAG in cap.tags:
                entry.side_effect_free = True
    return entries


def seeds(entries: dict[str, CatalogEntry]) -> dict[str, str]:
    """The cold-start exact map: every catalog text (normalised) and the capability name -> its capability.
    A text two capabilities share is ambiguous and seeds neither."""
    found: dict[str, set[str]] = {}
    for entry in entries.values():
        for text in (*entry.texts, entry.capability):
            found.setdefault(normalize(text), set()).add(entry.capability)
    return {phrase: next(iter(caps)) for phrase, caps in found.items() if phrase and len(caps) == 1}
