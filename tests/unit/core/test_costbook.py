"""Observed cost per successful call (reach.core.costbook) and the cost factor that prefers it to the declared
cost (reach.core.factors); the router's state feeds the book from COMPLETED receipts' usage."""

from __future__ import annotations

from reach.core.candidates import RouteRequest, select
from reach.core.costbook import CostBook
from reach.core.factors import FACTORS, NEUTRAL_COST, ScoringContext, instance_cost
from reach.kafka.codec import encode
from reach.names import Names
from reach.records import AgentRegistration, Receipt, Status, Usage
from reach.settings import KafkaSettings
from reach.streams.router.state import RouterState, StateLoop
from tests.unit.routing_fixtures import reg

COST = {f.name: f.values for f in FACTORS}["cost"]


def costs(*regs: AgentRegistration, observed: dict[str, float] | None = None) -> list[float]:
    request = RouteRequest(message_id="m", capability="text.echo")
    candidates = select(request, regs).candidates
    return COST(request, candidates, ScoringContext(costs=observed or {}))


def test_the_mean_of_the_window_once_there_are_enough_calls() -> None:
    book = CostBook(window_ms=1_000, max_samples=3, min_samples=2)
    book.add("a", 100, 4_000)
    assert "a" not in book.means  # one call is noise
    book.add("a", 200, 2_000)
    assert book.means["a"] == 3_000
    book.add("a", 300, 6_000)
    book.add("a", 400, 10_000)  # at most 3 samples: the oldest leaves
    assert book.means["a"] == 6_000
    book.sweep(1_350)  # time moves on (the feed sweeps every 10 s): a's calls of 200 and 300 leave the window
    assert "a" not in book.means  # one sample left
    book.add("a", 1_360, 2_000)
    assert book.means["a"] == 6_000
    book.sweep(5_000)
    assert book.means == {}
    book.add("c", 6_000, 5)
    book.add("c", 6_001, 5)
    book.forget("c")
    assert book.means == {}


def test_observed_cost_wins_over_declared_and_compares_in_currency_units() -> None:
    cheap_declared = reg("a").model_copy(update={"cost": 0.01})
    dear_declared = reg("b").model_copy(update={"cost": 0.05})
    assert costs(cheap_declared, dear_declared) == [1.0, 0.0]
    # a was observed at 0.09 per call (90,000 micro-units): dearer than b's declared 0.05
    assert costs(cheap_declared, dear_declared, observed={"a": 90_000.0}) == [0.0, 1.0]
    assert instance_cost(reg("c"), {"c": 20_000.0}) == 0.02 and instance_cost(reg("c"), {}) is None
    # observed only, nothing declared: still relative; one known cost alone has no range
    assert costs(reg("a"), reg("b"), observed={"a": 1.0, "b": 3.0}) == [1.0, 0.0]
    assert costs(reg("a"), reg("b"), observed={"a": 1.0}) == [NEUTRAL_COST] * 2


def test_the_routers_state_feeds_the_book_from_completed_receipts_with_a_cost() -> None:
    names = Names("ns")
    state = RouterState()
    loop = StateLoop(state=state, names=names, kafka=KafkaSettings())

    def receipt(mid: str, status: Status, at: int, cost: int | None) -> bytes:
        return encode(Receipt(message_id=mid, trace_id="t", tenant="d", capability="x.y", status=status, at=at,
                              agent_id="agent://a/b", instance_id="i1",
                              usage=Usage(input_tokens=1, cost_micros=cost)))

    for i in range(3):
        loop._dispatch(names.receipts, b"m", receipt(f"m{i}", Status.COMPLETED, 1_000 + i, 300 * (i + 1)))
    loop._dispatch(names.receipts, b"m", receipt("f", Status.FAILED, 1_010, 99_999))  # a failure is not a price
    loop._dispatch(names.receipts, b"m", receipt("n", Status.COMPLETED, 1_011, None))  # no cost reported
    assert state.costs.means == {"i1": 600.0}
    loop._dispatch(names.registry, b"i1", None)  # the instance left
    assert state.costs.means == {}
