"""Spend limits: how they are written (`5.00/day`, `2M/month`), the calendar period a count falls in, and whether
an app may spend more. Pure.

A limit is `amount/period`: a cost in units of the deployment's currency with up to six decimals (`5`, `5.00`,
`0.25`), tokens as a whole number with an optional `k` / `M` / `G` suffix (`1000`, `250k`, `2M`, `1.5M`); the
period is `day` or `month`, calendar periods in UTC, so every replica agrees when one ends. A limit is reached
once what was counted in its period is at or above its amount; the answer names when the period resets.
docs/decisions/0035-usage-and-spend-limits.md."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from reach.core.usage import format_micros
from reach.errors import ConfigError
from reach.records import SpendLimit

WARN_RATIO = 0.8  # the default warning threshold: a share of a limit used
MAX_AMOUNT = 10**15
_LIMIT = re.compile(r"\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmMgG]?)\s*/\s*([a-z]+)\s*")
_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


class Kind(StrEnum):
    """What a limit counts."""

    TOKENS = "tokens"  # input + output tokens
    COST = "cost"  # micro-units of REACH_CURRENCY


class Period(StrEnum):
    """A calendar period in UTC."""

    DAY = "day"
    MONTH = "month"


class BadLimit(ConfigError, ValueError):
    """A limit the CLI does not parse: what was given, what is expected."""


def parse_limit(text: str, kind: Kind) -> SpendLimit:
    """`5.00/day` (cost) or `2M/month` (tokens) as a SpendLimit; BadLimit naming the expected form otherwise."""
    example = "5.00/day or 0.5/month (currency units)" if kind is Kind.COST else "1000/day, 250k/day or 2M/month"
    found = _LIMIT.fullmatch(text)
    if found is None or found[3] not in Period.__members__.values():
        raise BadLimit(f"--limit-{kind} {text!r} is not a limit: expected AMOUNT/day or AMOUNT/month, e.g. {example}")
    number, suffix, period = found[1].replace(",", "").replace("_", ""), found[2].lower(), Period(found[3])
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise BadLimit(f"--limit-{kind} {text!r}: {number!r} is not a number; e.g. {example}") from None
    if kind is Kind.COST:
        if suffix:
            raise BadLimit(f"--limit-cost {text!r}: a cost takes no suffix; write the amount, e.g. {example}")
        amount = value * 1_000_000
        what = "a cost has at most six decimals (micro-units)"
    else:
        amount = value * _SUFFIX[suffix]
        what = "tokens are whole"
    if amount != amount.to_integral_value():
        raise BadLimit(f"--limit-{kind} {text!r}: {what}; e.g. {example}")
    if not 0 < amount <= MAX_AMOUNT:
        raise BadLimit(f"--limit-{kind} {text!r}: the amount must be above 0 and at most {MAX_AMOUNT:,}")
    return SpendLimit(kind=kind.value, amount=int(amount), period=period.value)


def parse_kind_limit(text: str) -> SpendLimit:
    """`tokens=2M/month` or `cost=5.00/day` (a tenant's limit in REACH_TENANT_LIMITS): the kind, then the limit."""
    kind, sep, rest = text.partition("=")
    if not sep or kind.strip() not in Kind.__members__.values():
        raise BadLimit(f"tenant limit {text!r} is not KIND=AMOUNT/PERIOD: expected e.g. tokens=2M/month or "
                       "cost=5.00/day")
    return parse_limit(rest, Kind(kind.strip()))


def known(limit: SpendLimit) -> bool:
    """False for a kind or period this reader does not know (a newer writer's): such a limit is not enforced."""
    return limit.kind in Kind.__members__.values() and limit.period in Period.__members__.values()


def format_limit(limit: SpendLimit) -> str:
    """A limit as the CLI takes it: 5.00/day, 2000000/month."""
    amount = format_micros(limit.amount) if limit.kind == Kind.COST else str(limit.amount)
    return f"{amount}/{limit.period}"


CLEAR = "none"  # `--limit-tokens none`: the app's token limits removed


def parse_limits(texts: Iterable[str], kind: Kind) -> list[SpendLimit] | None:
    """Each text parsed (BadLimit on the first that does not); None for `none` (remove this kind's limits). Two
    limits of one kind and period: BadLimit (which one would count is not for the parser to guess)."""
    texts = list(texts)
    if [t.strip().lower() for t in texts] == [CLEAR]:
        return None
    limits = [parse_limit(t, kind) for t in texts]
    periods_seen = [limit.period for limit in limits]
    if len(set(periods_seen)) != len(periods_seen):
        raise BadLimit(f"--limit-{kind} is given twice per {max(periods_seen, key=periods_seen.count)}: give one "
                       "limit per day and one per month at most")
    return limits


def merged(current: Iterable[SpendLimit], kind: Kind, changes: list[SpendLimit] | None) -> list[SpendLimit]:
    """`current` with the limits of `kind` changed: each change replaces the limit of its period, None removes
    every limit of that kind; sorted by kind and period."""
    keep = [limit for limit in current if limit.kind != kind or changes is not None]
    by_key = {(limit.kind, limit.period): limit for limit in keep}
    by_key.update({(limit.kind, limit.period): limit for limit in changes or []})
    return [by_key[k] for k in sorted(by_key)]


def bucket(period: Period, at_ms: int) -> str:
    """The name of the period `at_ms` falls in: 20261203 for a day, 202612 for a month (UTC)."""
    day = datetime.fromtimestamp(at_ms / 1000, UTC)
    return day.strftime("%Y%m%d") if period is Period.DAY else day.strftime("%Y%m")


def reset_at(period: Period, at_ms: int) -> int:
    """When the period `at_ms` falls in ends (epoch ms, UTC): the next midnight, or the first of next month."""
    now = datetime.fromtimestamp(at_ms / 1000, UTC)
    if period is Period.DAY:
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        end = datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=UTC)
    else:
        end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    return int(end.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Spent:
    """What was counted in one period: tokens and cost (micro-units)."""

    tokens: int = 0
    cost_micros: int = 0

    def of(self, kind: Kind) -> int:
        return self.tokens if kind is Kind.TOKENS else self.cost_micros


@dataclass(frozen=True, slots=True)
class Use:
    """One limit and how much of it is used."""

    limit: SpendLimit
    used: int
    scope: str | None = None  # whose limit (reach.spendbook: app:<id>, tenant:<t>), when the caller says

    @property
    def ratio(self) -> float:
        return self.used / self.limit.amount


@dataclass(frozen=True, slots=True)
class Within:
    """The app may spend more; `uses` for the metrics (each limit's share used)."""

    uses: tuple[Use, ...] = ()


@dataclass(frozen=True, slots=True)
class Exceeded:
    """A limit is reached: refused until `reset_at_ms` (the latest reset among the reached limits)."""

    use: Use
    reset_at_ms: int
    uses: tuple[Use, ...] = ()

    def reason(self) -> str:
        limit, used = self.use.limit, self.use.used
        shown = format_micros(used) if limit.kind == Kind.COST else str(used)
        return f"{limit.kind} limit {format_limit(limit)} reached ({shown} counted this {limit.period})"


def judge(limits: Iterable[SpendLimit], spent: Mapping[Period, Spent], now_ms: int, *,
          scope: str | None = None) -> Within | Exceeded:
    """Whether more may be spent: Exceeded when any known limit's period has counted at least its amount."""
    uses = tuple(Use(limit, spent.get(Period(limit.period), Spent()).of(Kind(limit.kind)), scope)
                 for limit in limits if known(limit))
    reached = [use for use in uses if use.used >= use.limit.amount]
    if not reached:
        return Within(uses)
    last = max(reached, key=lambda use: reset_at(Period(use.limit.period), now_ms))
    return Exceeded(last, reset_at(Period(last.limit.period), now_ms), uses)


def periods(limits: Iterable[SpendLimit]) -> tuple[Period, ...]:
    """The periods the known limits need counts of, each once."""
    return tuple(sorted({Period(limit.period) for limit in limits if known(limit)}))
