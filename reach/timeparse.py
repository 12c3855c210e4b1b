"""Parsing `--since/--until` values: ISO times, epoch millis, or relative (`15m`, `2h`, `1d` ago)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from reach.errors import ConfigError

_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str | None, *, now_ms: int | None = None) -> int | None:
    """Epoch millis for `text`, or None when not given; a bad value says what is accepted."""
    if text is None or text == "":
        return None
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    match = _RELATIVE.match(text.strip())
    if match:
        return now - int(match[1]) * _UNIT_S[match[2]] * 1000
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"Time {text!r} is not understood: expected an ISO time (2026-11-30T12:00:00), epoch millis, "
            "or a relative age like 15m, 2h, 1d."
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)
