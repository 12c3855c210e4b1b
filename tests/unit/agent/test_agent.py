"""Declaring an agent: names, versions and JSON Schemas are checked before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from reach.agent import Agent, InvalidDeclaration
from reach.core.versions import BadVersion
from reach.errors import InvalidName
from reach.records import AgentState, CapabilityMode


def test_a_valid_declaration_builds_its_registration() -> None:
    agent = Agent("agent://search/web", region="eu-1", max_concurrency=3, ttl_ms=9000)

    @agent.capability("web.search", version="1.2.3", input_schema={"type": "object"}, tags=["fast"],
                      examples=[{"q": "kafka"}])
    async def search(payload: Any) -> Any:
        return payload

    reg = agent.registration(state=AgentState.READY, heartbeat_at=1, inbox_topic="ns.agent.search.web",
                             inflight=2, assigned_partitions=[3, 1])
    assert reg.instance_id == agent.instance_id and reg.assigned_partitions == [1, 3]
    assert (reg.max_concurrency, reg.ttl_ms, reg.region, reg.inflight) == (3, 9000, "eu-1", 2)
    [cap] = reg.capabilities
    assert (cap.name, cap.version, cap.mode, cap.tags, cap.examples) == \
        ("web.search", "1.2.3", CapabilityMode.HANDLE, ["fast"], ['{"q":"kafka"}'])
    assert cap.input_schema == '{"type":"object"}' and cap.output_schema == "{}"
    assert agent.capabilities["web.search"].is_async


def test_scoring_declarations_reach_the_registration() -> None:
    agent = Agent("agent://search/web", weight=0.5, cost=0.02, priority_class=2)
    reg = agent.registration(state=AgentState.READY, heartbeat_at=1, inbox_topic="ns.agent.search.web",
                             inflight=0, assigned_partitions=[0])
    assert (reg.weight, reg.cost, reg.priority_class) == (0.5, 0.02, 2)
    assert Agent("agent://a/b").registration(state=AgentState.READY, heartbeat_at=1, inbox_topic="t", inflight=0,
                                             assigned_partitions=[]).priority_class == 0


def test_instance_ids_are_unique_per_agent_object() -> None:
    assert Agent("agent://a/b").instance_id != Agent("agent://a/b").instance_id


@pytest.mark.parametrize("agent_id", ["search/web", "agent://Search/web", "agent://-x/y", "agent://a//b"])
def test_bad_agent_ids_are_refused(agent_id: str) -> None:
    with pytest.raises(InvalidName):
        Agent(agent_id)


def test_bad_capability_name_version_and_schema_are_refused() -> None:
    agent = Agent("agent://a/b")
    with pytest.raises(InvalidName, match="dotted lower-case"):
        agent.capability("Web.Search", version="1.0.0")
    with pytest.raises(BadVersion, match="MAJOR.MINOR.PATCH"):
        agent.capability("web.search", version="1.0")
    with pytest.raises(InvalidDeclaration, match="invalid JSON Schema"):
        agent.capability("web.search", version="1.0.0", input_schema={"type": "objekt"})
    with pytest.raises(InvalidDeclaration, match="not valid JSON"):
        agent.capability("web.search", version="1.0.0", output_schema="{nope")


def test_handler_arity_and_duplicates() -> None:
    agent = Agent("agent://a/b")
    with pytest.raises(InvalidDeclaration, match="payload"):
        agent.capability("x.y", version="1.0.0")(lambda: None)
    agent.capability("x.y", version="1.0.0")(lambda payload, ctx: None)
    assert agent.capabilities["x.y"].wants_context
    with pytest.raises(InvalidDeclaration, match="twice"):
        agent.capability("x.y", version="1.0.0")


def test_an_agent_without_capabilities_does_not_start() -> None:
    with pytest.raises(InvalidDeclaration, match="no capability"):
        Agent("agent://a/b").validate()


def test_limits_are_checked() -> None:
    with pytest.raises(InvalidDeclaration):
        Agent("agent://a/b", max_concurrency=0)
    with pytest.raises(InvalidDeclaration):
        Agent("agent://a/b", ttl_ms=10)
