"""Budgets down a chain: what a request may still spend (`max_tokens`, `max_cost_micros`, Envelope v4), what a child
it sends inherits, and whether the router lets a request through. Pure.

A budget covers a request and every request it causes. A child sent while its parent's handler runs gets what is
left: the parent's budget minus the parent's usage so far, which is what its handler reported (`ctx.usage`) plus
what the children that already ended reported on their terminal receipts, theirs and their own children's (a child
still running counts for nothing until it ends); never below 0, never more than the child asks for. The child's
deadline is the parent's at the latest. A request with 0 left ends FAILED `BUDGET_EXCEEDED` at the router; a
negative or non-whole budget is a bad request (the SDK raises, the gateway answers 400, the CLI exits 2, the router
REJECTS `BAD_BUDGET`). docs/decisions/0043-mcp-bridge-budgets-and-measured-cost.md."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from reach.errors import ReachError
from reach.records import Usage

MAX_BUDGET = 10**15  # tokens or micro-units: far above any real budget; more is a unit mistake
FIELDS = ("max_tokens", "max_cost_micros")
# the terminal receipt's `timings` keys that carry the usage of the children a run waited for (no Receipt release)
CHILD_KEYS = {"input_tokens": "children_input_tokens", "output_tokens": "children_output_tokens",
              "cost_micros": "children_cost_micros"}
CHILD_CALLS = "children"


class BadBudget(ReachError, ValueError):
    """A budget that is not a whole number >= 0 (or a cost that is not an amount >= 0): what was given and expected."""

    exit_code = 2


def check_budget(value: Any, what: str) -> int | None:
    """A budget field as the envelope holds it (None: no budget); BadBudget naming the field otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and (not math.isfinite(value) or not value.is_integer())):
        raise BadBudget(f"{what} must be a whole number >= 0 (or unset for no budget); got {value!r:.40}")
    whole = int(value)
    if not 0 <= whole <= MAX_BUDGET:
        raise BadBudget(f"{what} must be between 0 and {MAX_BUDGET:,}; got {whole}")
    return whole


def cost_micros(amount: Any, what: str = "max_cost") -> int | None:
    """A cost in units of the currency (`0.25`, "1.50") as micro-units; BadBudget for a negative, non-finite or
    over-precise amount."""
    if amount is None:
        return None
    if isinstance(amount, bool):
        raise BadBudget(f"{what} must be an amount >= 0 in the deployment's currency, e.g. 0.25; got {amount!r}")
    try:
        value = Decimal(str(amount).strip())
    except InvalidOperation:
        raise BadBudget(f"{what} must be an amount >= 0 in the deployment's currency, e.g. 0.25; got "
                        f"{amount!r:.40}") from None
    if not value.is_finite() or value < 0:
        raise BadBudget(f"{what} must be a finite amount >= 0, e.g. 0.25; got {amount!r:.40}")
    micros = value * 1_000_000
    if micros != micros.to_integral_value():
        raise BadBudget(f"{what} has at most six decimals (micro-units); got {amount!r:.40}")
    return check_budget(int(micros), what)


@dataclass(frozen=True, slots=True)
class Spent:
    """Usage added up: tokens and cost (micro-units), and how many requests below it ended (children, theirs...)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cost_micros + other.cost_micros, self.calls + other.calls)

    def usage(self) -> Usage | None:
        """As the status row shows it (None when nothing was spent by any child)."""
        if not self.calls:
            return None
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                     cost_micros=self.cost_micros or None)


def of_usage(usage: Usage | None) -> Spent:
    if usage is None:
        return Spent()
    return Spent(usage.input_tokens, usage.output_tokens, usage.cost_micros or 0)


def children_of(timings: Mapping[str, int]) -> Spent:
    """The children's usage a terminal receipt carries in its timings (Spent() when none)."""
    def count(key: str) -> int:
        return max(0, int(timings.get(key, 0)))

    return Spent(count(CHILD_KEYS["input_tokens"]), count(CHILD_KEYS["output_tokens"]),
                 count(CHILD_KEYS["cost_micros"]), count(CHILD_CALLS))


def as_timings(children: Spent) -> dict[str, int]:
    """The timings entries that carry `children` on a terminal receipt (none when no child ended)."""
    if not children.calls:
        return {}
    return {CHILD_KEYS["input_tokens"]: children.input_tokens, CHILD_KEYS["output_tokens"]: children.output_tokens,
            CHILD_KEYS["cost_micros"]: children.cost_micros, CHILD_CALLS: children.calls}


def subtree(usage: Usage | None, timings: Mapping[str, int]) -> Spent:
    """What one ended child cost its parent: its own usage and its children's, counted as one call."""
    return of_usage(usage) + children_of(timings) + Spent(calls=1)


def left(budget: int | None, spent: int) -> int | None:
    """What a budget has left after `spent` (never below 0); None: no budget."""
    return None if budget is None else max(0, budget - spent)


def inherit(parent: Mapping[str, int | None], spent: Spent, asked: Mapping[str, int | None]) -> dict[str, int]:
    """A child's budget fields: what is left of the parent's, capped by what the child asks for itself."""
    found: dict[str, int] = {}
    for name, used in (("max_tokens", spent.tokens), ("max_cost_micros", spent.cost_micros)):
        remaining = left(parent.get(name), used)
        own = asked.get(name)
        chosen = own if remaining is None else (remaining if own is None else min(own, remaining))
        if chosen is not None:
            found[name] = chosen
    return found


def grant(parent: Mapping[str, int | None], child: Mapping[str, int | None]) -> Spent:
    """What a child's budget fields hold of its parent's budget (reserved while the child runs): each field the
    parent budgets, as much as the child was given; nothing for a field the parent does not budget."""
    tokens = child.get("max_tokens") if parent.get("max_tokens") is not None else None
    cost = child.get("max_cost_micros") if parent.get("max_cost_micros") is not None else None
    return Spent(input_tokens=tokens or 0, cost_micros=cost or 0)


def child_budget_ms(asked_ms: int, parent_deadline: int, now_ms: int) -> int:
    """The child's total budget: what it asks, ending no later than its parent's deadline (at least 1 ms: a child
    whose parent is out of time is sent and EXPIRES at the router, so the caller sees why)."""
    return max(1, min(asked_ms, parent_deadline - now_ms))


def problem(envelope: Mapping[str, Any]) -> str | None:
    """Why a decoded envelope's budget is malformed (REJECTED BAD_BUDGET), or None."""
    for name in FIELDS:
        value = envelope.get(name)
        if value is not None and not (isinstance(value, int) and 0 <= value <= MAX_BUDGET):
            return f"{name} must be a whole number between 0 and {MAX_BUDGET:,} (or null); got {value!r:.40}"
    return None


def exhausted(envelope: Mapping[str, Any]) -> str | None:
    """Why a decoded envelope may not be routed because its budget has nothing left (BUDGET_EXCEEDED), or None."""
    spent = [name for name in FIELDS if envelope.get(name) == 0]
    if not spent:
        return None
    return (f"the request's budget has nothing left ({', '.join(f'{n} 0' for n in spent)}): its parent "
            f"{envelope.get('parent_id') or '(none)'} and the requests before it spent it")
