"""What a handler's run cost, checked: tokens, model and cost as a handler reports them (`ctx.usage`) or returns
them, turned into the Receipt's `Usage` (v9). Pure.

Usage is bookkeeping, never the request's outcome: a value that is not a whole number >= 0 (negative, NaN,
infinite, a bool, a string), a token count above `MAX_TOKENS` per call or a cost above `MAX_COST_MICROS` is
dropped with a problem the caller logs as a warning, and the rest of the report is kept. Reports add up: a
handler that calls two models reports twice and its receipt carries the sum (the model last named).
docs/decisions/0035-usage-and-spend-limits.md."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reach.records import Usage

MAX_TOKENS = 100_000_000  # per call: far above any context window; more is a unit mistake (bytes, micros)
MAX_COST_MICROS = 1_000_000_000_000  # a million units of the currency for one call
MAX_MODEL_CHARS = 128
# the keys the SDK reads from a returned value's "usage" object: ours, and the OpenAI / Anthropic spellings
_INPUT_KEYS = ("input_tokens", "prompt_tokens")
_OUTPUT_KEYS = ("output_tokens", "completion_tokens")
_COST_KEYS = ("cost", "cost_micros")


@dataclass(frozen=True, slots=True)
class Report:
    """One checked report: the fields that passed (None: not reported or dropped) and why the others were dropped."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    cost_micros: int | None = None
    problems: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return self.input_tokens is None and self.output_tokens is None and self.model is None \
            and self.cost_micros is None


def _whole(value: Any, what: str, most: int, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append(f"{what} must be a whole number >= 0; got {type(value).__name__} {value!r:.40}: dropped")
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        problems.append(f"{what} must be a whole number >= 0; got {value!r}: dropped")
        return None
    whole = int(value)
    if whole < 0:
        problems.append(f"{what} must be >= 0; got {whole}: dropped")
        return None
    if whole > most:
        problems.append(f"{what} {whole} is above {most:,} for one call (a unit mistake?): dropped")
        return None
    return whole


def _model(value: Any, problems: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_MODEL_CHARS:
        problems.append(f"model must be a non-empty string of at most {MAX_MODEL_CHARS} characters; got "
                        f"{value!r:.60}: dropped")
        return None
    return value.strip()


def check_report(*, input_tokens: Any = None, output_tokens: Any = None, model: Any = None, cost: Any = None) -> Report:
    """One report checked field by field; `cost` is in micro-units of the currency (1.25 USD = 1_250_000)."""
    problems: list[str] = []
    return Report(input_tokens=_whole(input_tokens, "input_tokens", MAX_TOKENS, problems),
                  output_tokens=_whole(output_tokens, "output_tokens", MAX_TOKENS, problems),
                  model=_model(model, problems),
                  cost_micros=_whole(cost, "cost", MAX_COST_MICROS, problems),
                  problems=tuple(problems))


def _first(found: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((found[k] for k in keys if k in found), None)


def from_result(value: Any) -> Report | None:
    """The usage a handler returned, or None when the value carries none: a JSON object with a `usage` object
    holding `input_tokens` / `output_tokens` (or `prompt_tokens` / `completion_tokens`), optionally `model` and
    `cost` (micro-units); `model` may also sit beside `usage`, as in an LLM API's response. The value is returned
    to the caller unchanged."""
    if not isinstance(value, Mapping):
        return None
    found = value.get("usage")
    if not isinstance(found, Mapping) or not any(k in found for k in (*_INPUT_KEYS, *_OUTPUT_KEYS, *_COST_KEYS)):
        return None
    model = found.get("model", value.get("model"))
    return check_report(input_tokens=_first(found, _INPUT_KEYS), output_tokens=_first(found, _OUTPUT_KEYS),
                 model=model, cost=_first(found, _COST_KEYS))


@dataclass
class Meter:
    """The usage of one run, report after report: token counts and costs add up, the last model named stays."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cost_micros: int | None = None
    reported: bool = field(default=False)

    def add(self, report: Report) -> None:
        if report.empty:
            return
        self.reported = True
        self.input_tokens = min(MAX_TOKENS, self.input_tokens + (report.input_tokens or 0))
        self.output_tokens = min(MAX_TOKENS, self.output_tokens + (report.output_tokens or 0))
        self.model = report.model or self.model
        if report.cost_micros is not None:
            self.cost_micros = min(MAX_COST_MICROS, (self.cost_micros or 0) + report.cost_micros)

    def usage(self, *, currency: str | None, source: str | None) -> Usage | None:
        """The receipt's record, or None when nothing valid was reported."""
        if not self.reported:
            return None
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens, model=self.model,
                     cost_micros=self.cost_micros, currency=currency if self.cost_micros is not None else None,
                     source=source)


@dataclass(frozen=True, slots=True)
class Billable:
    """What a receipt's usage may charge: tokens and cost, each at least 0 and at most the per-call bounds, and why
    a part was not taken as it came."""

    tokens: int
    cost_micros: int
    problems: tuple[str, ...] = ()


def billable(used: Usage, *, currency: str) -> Billable:
    """The amounts a usage counter charges for one receipt's usage. A receipt is read from Kafka, where anything with
    write access can produce one: a negative count or cost (which would lower a spend) counts as 0, one above
    MAX_TOKENS / MAX_COST_MICROS counts as that bound (a forged huge claim neither escapes the count nor overflows
    it), and a cost in another currency than the deployment's is not counted (its tokens are: a limit in USD cannot
    add up yen)."""
    problems: list[str] = []

    def bounded(value: int | None, what: str, most: int) -> int:
        if value is None or value == 0:
            return 0
        if value < 0:
            problems.append(f"{what} {value} is negative: counted as 0")
            return 0
        if value > most:
            problems.append(f"{what} {value} is above {most:,} for one call: counted as {most:,}")
            return most
        return value

    tokens = bounded(used.input_tokens, "input_tokens", MAX_TOKENS) + bounded(used.output_tokens, "output_tokens",
                                                                                 MAX_TOKENS)
    cost = bounded(used.cost_micros, "cost_micros", MAX_COST_MICROS)
    if cost and used.currency not in (None, currency):
        problems.append(f"cost in {used.currency}, not {currency} (REACH_CURRENCY): its cost is not counted")
        cost = 0
    return Billable(tokens=tokens, cost_micros=cost, problems=tuple(problems))


def format_micros(micros: int) -> str:
    """Micro-units as an amount with two decimals at least: 1_250_000 -> 1.25, 1_234_567 -> 1.234567."""
    whole, rest = divmod(micros, 1_000_000)
    decimals = f"{rest:06d}".rstrip("0")
    return f"{whole}.{decimals.ljust(2, '0')}"


# ISO 4217 active codes: REACH_CURRENCY must be one (a typo would price every call in a currency nobody uses)
CURRENCIES = frozenset("""
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF
CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG
HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA
MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD
RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX
USD UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR ZMW ZWL
""".split())


def check_currency(code: str) -> str:
    """The ISO 4217 code, upper-cased; ValueError naming what was expected when it is not one."""
    normal = code.strip().upper()
    if normal not in CURRENCIES:
        raise ValueError(f"currency {code!r} is not an ISO 4217 code: expected three letters such as USD, EUR or "
                         "JPY (REACH_CURRENCY, one for the whole deployment)")
    return normal
