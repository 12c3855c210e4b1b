"""Spend limits as the CLI writes them, the calendar periods they count in, and the door's judgement."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reach.core.spend import (
    BadLimit,
    Exceeded,
    Kind,
    Period,
    Spent,
    Within,
    bucket,
    format_limit,
    judge,
    merged,
    parse_limit,
    parse_limits,
    reset_at,
)
from reach.errors import ConfigError
from reach.records import SpendLimit


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(("text", "kind", "amount", "period"), [
    ("5.00/day", Kind.COST, 5_000_000, "day"),
    ("0.25 / month", Kind.COST, 250_000, "month"),
    ("1,000/day", Kind.TOKENS, 1_000, "day"),
    ("250k/day", Kind.TOKENS, 250_000, "day"),
    ("2M/month", Kind.TOKENS, 2_000_000, "month"),
    ("1.5M/month", Kind.TOKENS, 1_500_000, "month"),
])
def test_limits_parse(text: str, kind: Kind, amount: int, period: str) -> None:
    assert parse_limit(text, kind) == SpendLimit(kind=kind.value, amount=amount, period=period)


@pytest.mark.parametrize(("text", "kind", "says"), [
    ("5", Kind.COST, "AMOUNT/day"),
    ("5/week", Kind.COST, "AMOUNT/day"),
    ("-5/day", Kind.COST, "AMOUNT/day"),
    ("0/day", Kind.TOKENS, "above 0"),
    ("1.5/day", Kind.TOKENS, "whole"),
    ("5M/day", Kind.COST, "no suffix"),
    ("0.0000001/day", Kind.COST, "six decimals"),
    ("abc/day", Kind.TOKENS, "AMOUNT/day"),
])
def test_a_limit_in_another_form_is_a_config_error_naming_the_form(text: str, kind: Kind, says: str) -> None:
    with pytest.raises(BadLimit, match=says) as caught:
        parse_limit(text, kind)
    assert isinstance(caught.value, ConfigError)  # the CLI's exit 2


def test_limits_of_one_kind_per_period_and_none_clears() -> None:
    assert parse_limits(["none"], Kind.TOKENS) is None
    with pytest.raises(BadLimit, match="twice"):
        parse_limits(["1k/day", "2k/day"], Kind.TOKENS)
    current = [parse_limit("5/day", Kind.COST), parse_limit("1k/day", Kind.TOKENS)]
    changed = merged(current, Kind.TOKENS, parse_limits(["2k/day", "1M/month"], Kind.TOKENS))
    assert [format_limit(x) for x in changed] == ["5.00/day", "2000/day", "1000000/month"]
    assert [x.kind for x in merged(changed, Kind.TOKENS, None)] == ["cost"]


def test_periods_are_utc_calendar_periods() -> None:
    at = ms("2026-12-31T23:59:59")
    assert (bucket(Period.DAY, at), bucket(Period.MONTH, at)) == ("20261231", "202612")
    assert reset_at(Period.DAY, at) == ms("2027-01-01T00:00:00")
    assert reset_at(Period.MONTH, at) == ms("2027-01-01T00:00:00")
    assert reset_at(Period.MONTH, ms("2026-02-10T12:00:00")) == ms("2026-03-01T00:00:00")
    assert reset_at(Period.DAY, ms("2026-02-28T00:00:00")) == ms("2026-03-01T00:00:00")


def test_judge_refuses_at_the_limit_with_the_latest_reset() -> None:
    now = ms("2026-12-03T10:00:00")
    limits = [parse_limit("1000/day", Kind.TOKENS), parse_limit("5.00/month", Kind.COST)]
    within = judge(limits, {Period.DAY: Spent(tokens=999), Period.MONTH: Spent(cost_micros=4_000_000)}, now)
    assert isinstance(within, Within) and [round(u.ratio, 3) for u in within.uses] == [0.999, 0.8]
    day = judge(limits, {Period.DAY: Spent(tokens=1000)}, now)
    assert isinstance(day, Exceeded) and day.reset_at_ms == ms("2026-12-04T00:00:00")
    assert day.reason() == "tokens limit 1000/day reached (1000 counted this day)"
    both = judge(limits, {Period.DAY: Spent(tokens=1000), Period.MONTH: Spent(cost_micros=6_000_000)}, now)
    assert isinstance(both, Exceeded) and both.reset_at_ms == ms("2027-01-01T00:00:00")


def test_a_limit_of_a_kind_or_period_this_reader_does_not_know_is_not_enforced() -> None:
    newer = SpendLimit(kind="requests", amount=1, period="day")
    weekly = SpendLimit(kind="tokens", amount=1, period="week")
    assert judge([newer, weekly], {Period.DAY: Spent(tokens=10)}, 0) == Within(())
