"""Parsing `--since/--until` values: ISO times, epoch millis, or relative (`15m`, `2h`, `1d` ago; a duration of
reach.core.durations, whose bare numbers are no age here: they are epoch millis)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from reach.core.durations import BadDuration, parse_ms
from reach.errors import ConfigError


def parse_time(text: str | None, *, now_ms: int | None = None) -> int | None:
    """Epoch millis for `text`, or None when not given; a bad value says what is accepted."""
    if text is None or text == "":
        return None
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    try:
        return now - parse_ms(text)
    except BadDuration:
        pass  # not an age: epoch millis or an ISO time
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
