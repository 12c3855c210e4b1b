"""One capability version, one contract; dependencies known and acyclic (reach.core.declarations, pure)."""

from __future__ import annotations

import json

import pytest

from reach.core.declarations import dependency_problem, parse_dependency, schema_conflict
from reach.errors import ReachError
from reach.records import AgentRegistration
from tests.unit.routing_fixtures import reg


def serving(instance_id: str, capability: str, *, agent_id: str | None = None, version: str = "1.2.0",
            input_schema: dict[str, object] | None = None, depends_on: list[str] | None = None) -> AgentRegistration:
    base = reg(instance_id, agent_id=agent_id or f"agent://t/{instance_id}", capability=capability, version=version)
    caps = [c.model_copy(update={"input_schema": json.dumps(input_schema or {"type": "object"})})
            for c in base.capabilities]
    return base.model_copy(update={"capabilities": caps, "depends_on": depends_on or []})


def test_a_changed_contract_under_the_same_version_is_refused_with_the_diff() -> None:
    live = [serving("a1", "doc.summarize", input_schema={"type": "object", "required": ["text"]})]
    mine = serving("b1", "doc.summarize", input_schema={"type": "object", "required": ["url"]})
    problem = schema_conflict(mine, live)
    assert problem is not None and "doc.summarize@1.2.0" in problem and "input_schema" in problem
    assert '-    "text"' in problem and '+    "url"' in problem
    same = serving("b2", "doc.summarize", input_schema={"required": ["text"], "type": "object"})  # keys reordered
    assert schema_conflict(same, live) is None
    assert schema_conflict(serving("b3", "doc.summarize", version="1.3.0", input_schema={"x": 1}), live) is None


def test_dependencies_must_be_known_within_their_range() -> None:
    registered = [serving("s1", "doc.search", version="2.1.0")]
    no_topics = lambda _name: False  # noqa: E731
    ok = serving("m1", "doc.answer", depends_on=["doc.search@^2"])
    assert dependency_problem(ok, registered, no_topics) is None
    old = serving("m1", "doc.answer", depends_on=["doc.search@^3"])
    assert "served only at 2.1.0" in (dependency_problem(old, registered, no_topics) or "")
    ghost = serving("m1", "doc.answer", depends_on=["doc.ghost"])
    assert "no agent serves" in (dependency_problem(ghost, registered, no_topics) or "")
    assert dependency_problem(ghost, registered, lambda name: name == "doc.ghost") is None, \
        "a capability the namespace has (its topic exists) is known while its agents restart"


def test_a_cycle_through_the_registration_is_refused_and_named() -> None:
    registered = [serving("s1", "doc.search", depends_on=["doc.rank"]),
                  serving("r1", "doc.rank", depends_on=["doc.answer"])]
    mine = serving("m1", "doc.answer", depends_on=["doc.search"])
    problem = dependency_problem(mine, registered, lambda _n: True)
    assert problem is not None and "doc.answer -> doc.search -> doc.rank -> doc.answer" in problem
    assert "serves itself" in (dependency_problem(serving("m2", "doc.answer", depends_on=["doc.answer"]), [],
                                                  lambda _n: True) or "")


def test_a_dependency_entry_is_a_capability_and_an_optional_range() -> None:
    assert parse_dependency("doc.search") == ("doc.search", "*")
    assert parse_dependency("doc.search@>=1.2 <2") == ("doc.search", ">=1.2 <2")
    for bad in ("Doc Search", "doc.search@not-a-range!"):
        with pytest.raises(ReachError):
            parse_dependency(bad)


def test_subscribers_share_the_events_schema_but_not_their_results() -> None:
    from reach.records import CapabilityMode

    def subscriber(instance_id: str, output: dict[str, object], event: dict[str, object]) -> AgentRegistration:
        base = serving(instance_id, "shop.order.created", input_schema=event)
        caps = [c.model_copy(update={"mode": CapabilityMode.SUBSCRIBE, "output_schema": json.dumps(output)})
                for c in base.capabilities]
        return base.model_copy(update={"capabilities": caps})

    event = {"type": "object", "required": ["order_id"]}
    live = [subscriber("audit-1", {"type": "object"}, event)]
    assert schema_conflict(subscriber("notify-1", {}, event), live) is None
    assert "input_schema" in (schema_conflict(subscriber("notify-2", {}, {"type": "object"}), live) or "")
