"""Normalising intent text, so that an exact mapping matches however a caller spaces or capitalises it."""

from __future__ import annotations

import re

_SPACE = re.compile(r"\s+")
_EDGE = " \t\n.!?,;:\"'"
MAX_INTENT_CHARS = 2_000  # an intent is a sentence or two; longer text is refused, not truncated silently


def normalize(text: str) -> str:
    """Lower-case, collapse whitespace, strip surrounding punctuation: `  Weather Forecast?` -> `weather forecast`."""
    return _SPACE.sub(" ", text.strip().lower()).strip(_EDGE)


def phrase_of_name(capability: str) -> str:
    """A capability name read as words: `travel.flight-booking` -> `travel flight booking`."""
    return capability.replace(".", " ").replace("-", " ")


def family(capability: str) -> str:
    """A capability's family, the fuzzy stage's unit: its name's first segment (`support.billing` -> `support`)."""
    return capability.split(".", 1)[0]
