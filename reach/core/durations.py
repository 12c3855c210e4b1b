"""Durations as people write them (`250ms`, `30s`, `5m`, `1h`, `1d`) to milliseconds and back: the one parser
behind retry tiers, POLICY durations, `reach canary --step` and relative `--since/--until` ages. Pure.

The grammar is the union of what those callers accepted before they shared it: surrounding whitespace, then a
whole number, then a unit `ms`, `s`, `m`, `h` or `d`. What a number without a unit means is the caller's word
(`bare=`): milliseconds for POLICY, seconds for a canary step, nothing (an error) for a tier or an age, where a
bare number is a name or an epoch time. The union widened each caller by units only (a tier may be `1d`, an age
`500ms`): no negative, fractional or empty value is accepted anywhere."""

from __future__ import annotations

import re
from typing import Literal

from reach.errors import ConfigError

Unit = Literal["ms", "s", "m", "h", "d"]
UNIT_MS: dict[str, int] = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+)(ms|s|m|h|d)?\s*")
HINT = "expected a whole number and a unit (ms, s, m, h or d), e.g. 250ms, 30s, 5m or 1h"


class BadDuration(ConfigError, ValueError):
    """A text that is not a duration: `<what> '<text>' is not a duration: <hint>`, the one message every caller
    shows (a ValueError too, so pydantic validators report it as a validation error)."""


def parse_ms(text: str, *, bare: Unit | None = None, least: int = 0, what: str = "duration", hint: str = HINT) -> int:
    """Milliseconds of `text`; a number without a unit is in the `bare` unit (`None`: refused). BadDuration, worded
    `<what> <text> is not a duration: <hint>`, when the text does not parse or comes to less than `least` ms."""
    found = _DURATION.fullmatch(text)
    unit = found[2] or bare if found else None
    if found is None or unit is None or int(found[1]) * UNIT_MS[unit] < least:
        raise BadDuration(f"{what} {text!r} is not a duration: {hint}")
    return int(found[1]) * UNIT_MS[unit]


def format_ms(ms: int) -> str:
    """Milliseconds as operators write them, in the largest unit up to hours that divides them: 86400000 -> 24h."""
    for unit in ("h", "m", "s"):
        size = UNIT_MS[unit]
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
