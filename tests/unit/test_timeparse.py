"""reach.timeparse: `--since/--until` as relative ages (reach.core.durations), epoch millis or ISO times."""

from __future__ import annotations

import pytest

from reach.errors import ConfigError
from reach.timeparse import parse_time

NOW = 1_800_000_000_000


@pytest.mark.parametrize(("text", "expected"), [
    ("15m", NOW - 900_000), ("2h", NOW - 7_200_000), ("1d", NOW - 86_400_000), (" 30s ", NOW - 30_000),
    ("500ms", NOW - 500),                                   # the shared grammar's unit, harmless as an age
    ("1700000000000", 1_700_000_000_000),                    # a bare number is epoch millis, never an age
    ("2026-11-30T12:00:00", 1_796_040_000_000), (None, None), ("", None),
])
def test_ages_epoch_millis_and_iso_times(text: str | None, expected: int | None) -> None:
    assert parse_time(text, now_ms=NOW) == expected


def test_a_bad_time_says_what_is_accepted() -> None:
    with pytest.raises(ConfigError, match="expected an ISO time .* or a relative age like 15m, 2h, 1d"):
        parse_time("-5m", now_ms=NOW)
