"""Budgets down a chain (reach.core.allowance): checks, inheritance, the router's verdicts, and the children's
usage carried on a terminal receipt into the parent's status row."""

from __future__ import annotations

import math
from typing import Any

import pytest

from reach.core.allowance import (
    BadBudget,
    Spent,
    as_timings,
    check_budget,
    child_budget_ms,
    children_of,
    cost_micros,
    exhausted,
    inherit,
    problem,
    subtree,
)
from reach.core.lifecycle import StatusRow, fold
from reach.core.routing import parse_request
from reach.records import Receipt, Status, Usage


def envelope_dict(**fields: Any) -> dict[str, Any]:
    return {"message_id": "m", "capability": "text.echo", "capability_version": "*", **fields}


@pytest.mark.parametrize("value", [-1, 1.5, math.nan, math.inf, "10", True, 10**16])
def test_a_budget_is_a_whole_number_from_0(value: object) -> None:
    with pytest.raises(BadBudget, match="max_tokens"):
        check_budget(value, "max_tokens")
    assert check_budget(None, "max_tokens") is None and check_budget(250, "max_tokens") == 250
    assert check_budget(3.0, "max_tokens") == 3


@pytest.mark.parametrize("amount", ["-0.01", "nan", "inf", "0.0000001", "a lot", True])
def test_a_cost_budget_is_an_amount_with_at_most_six_decimals(amount: object) -> None:
    with pytest.raises(BadBudget, match="--max-cost"):
        cost_micros(amount, "--max-cost")
    assert cost_micros("0.25") == 250_000 and cost_micros(1.5) == 1_500_000 and cost_micros(0) == 0


def test_a_child_gets_what_is_left_never_below_0_never_more_than_it_asks() -> None:
    parent = {"max_tokens": 250, "max_cost_micros": None}
    assert inherit(parent, Spent(100, 50), {}) == {"max_tokens": 100}
    assert inherit(parent, Spent(200, 100), {}) == {"max_tokens": 0}
    assert inherit(parent, Spent(10, 0), {"max_tokens": 40}) == {"max_tokens": 40}
    assert inherit(parent, Spent(), {"max_cost_micros": 7}) == {"max_tokens": 250, "max_cost_micros": 7}
    assert inherit({"max_tokens": None, "max_cost_micros": 1_000}, Spent(cost_micros=400), {}) == {
        "max_cost_micros": 600}
    assert inherit({}, Spent(5, 5), {}) == {}  # no budget: nothing inherited, nothing limited


def test_a_childs_deadline_is_its_parents_at_the_latest() -> None:
    assert child_budget_ms(45_000, parent_deadline=10_000, now_ms=4_000) == 6_000
    assert child_budget_ms(2_000, parent_deadline=10_000, now_ms=4_000) == 2_000
    assert child_budget_ms(2_000, parent_deadline=3_000, now_ms=4_000) == 1  # out of time: it EXPIRES at the router


def test_the_router_rejects_a_negative_budget_and_fails_an_empty_one() -> None:
    bad = parse_request(envelope_dict(max_tokens=-1))
    assert getattr(bad, "code", None) == "BAD_BUDGET" and "max_tokens" in getattr(bad, "message", "")
    assert problem(envelope_dict(max_cost_micros=2**62)) is not None
    assert exhausted(envelope_dict(max_tokens=5, max_cost_micros=None)) is None
    why = exhausted(envelope_dict(max_tokens=0, parent_id="P1"))
    assert why is not None and "max_tokens 0" in why and "P1" in why
    assert exhausted(envelope_dict()) is None


def test_a_childs_subtree_counts_its_usage_and_its_own_childrens() -> None:
    grand = Spent(10, 5, 3, calls=2)
    child = subtree(Usage(input_tokens=100, output_tokens=50, cost_micros=7), as_timings(grand))
    assert child == Spent(110, 55, 10, calls=3)
    assert as_timings(Spent()) == {} and children_of({"run_ms": 4}) == Spent()


def test_the_parents_row_shows_its_childrens_summed_usage() -> None:
    def receipt(status: Status, at: int, timings: dict[str, int]) -> Receipt:
        return Receipt(message_id="m1", trace_id="t", tenant="acme", capability="chain.parent", status=status, at=at,
                       usage=Usage(input_tokens=1, output_tokens=1), timings=timings)

    below = as_timings(Spent(200, 100, 0, calls=2))
    row = fold(fold(None, receipt(Status.STARTED, 1, {})), receipt(Status.COMPLETED, 2, {"run_ms": 5, **below}))
    assert row.children_usage == Usage(input_tokens=200, output_tokens=100)
    assert StatusRow.model_validate_json(row.model_dump_json()).children_usage == row.children_usage
    assert fold(None, receipt(Status.COMPLETED, 2, {"run_ms": 5})).children_usage is None
