"""reach.core.durations: the one duration parser (tiers, POLICY, canary steps, relative ages) and its format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reach.core.durations import UNIT_MS, BadDuration, format_ms, parse_ms
from reach.errors import ConfigError

UNITS = st.sampled_from(sorted(UNIT_MS))


@given(st.integers(min_value=0, max_value=10**15))
def test_a_formatted_duration_parses_back_to_its_milliseconds(ms: int) -> None:
    assert parse_ms(format_ms(ms)) == ms


@given(st.integers(min_value=0, max_value=10**9), UNITS, st.sampled_from(["", " ", "\t"]))
def test_a_number_and_a_unit_is_that_many_units(count: int, unit: str, pad: str) -> None:
    assert parse_ms(f"{pad}{count}{unit}{pad}") == count * UNIT_MS[unit]


@given(st.integers(min_value=1, max_value=10**12))
def test_format_picks_the_largest_whole_unit_up_to_hours(ms: int) -> None:
    text = format_ms(ms)
    count, unit = int(text.rstrip("hms")), text.lstrip("0123456789")
    assert unit in ("ms", "s", "m", "h") and count * UNIT_MS[unit] == ms
    larger = [u for u in ("s", "m", "h") if UNIT_MS[u] > UNIT_MS[unit]]
    assert all(ms % UNIT_MS[u] for u in larger), f"{text} could be written in a larger unit"


@pytest.mark.parametrize(("text", "bare", "ms"), [("750", "ms", 750), ("3", "s", 3_000), ("2m", "s", 120_000),
                                                  ("1d", None, 86_400_000), ("500ms", None, 500)])
def test_a_bare_number_is_in_the_callers_unit(text: str, bare: str | None, ms: int) -> None:
    assert parse_ms(text, bare=bare) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", " ", "soon", "5", "-5s", "1.5s", "5 s", "5sec", "s", "5S", "ms5", "2²s"])
def test_what_is_not_a_duration_says_what_is_expected(text: str) -> None:
    with pytest.raises(BadDuration, match=r"^duration .* is not a duration: expected a whole number and a unit"):
        parse_ms(text)


def test_the_error_is_a_config_error_and_a_value_error_worded_by_the_caller() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_ms("0s", least=1, what="--step", hint="pass e.g. --step 60s")
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == "--step '0s' is not a duration: pass e.g. --step 60s"
    assert parse_ms("1ms", least=1) == 1


@given(st.text(max_size=12))
def test_anything_either_parses_to_a_whole_non_negative_count_or_is_refused(text: str) -> None:
    try:
        ms = parse_ms(text, bare="s")
    except BadDuration:
        return
    assert ms >= 0 and text.strip()[-1] in "0123456789smhd"
