"""The pure registry view: latest heartbeat wins, tombstones remove, silence beyond 2 x ttl is OFFLINE."""

from __future__ import annotations

import pytest

from reach.core.views.registryview import BadQuery, RegistryView, Where
from reach.records import AgentRegistration, AgentState, Capability


def reg(instance: str, *, state: AgentState = AgentState.READY, at: int = 1000, ttl: int = 100,
        inflight: int = 0) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id=instance, build_version="1", state=state,
                             heartbeat_at=at, ttl_ms=ttl, inflight=inflight, max_concurrency=4,
                             inbox_topic="ns.agent.a.b")


def test_latest_wins_and_tombstone_removes() -> None:
    view = RegistryView()
    view.apply("i1", reg("i1", state=AgentState.STARTING))
    view.apply("i1", reg("i1", inflight=3))
    view.apply("i2", reg("i2"))
    view.apply("i2", None)
    [info] = view.instances(now_ms=1050)
    assert info.effective_state is AgentState.READY and info.load == 0.75 and info.heartbeat_age_ms == 50
    assert [r.instance_id for r in view.live(1050)] == ["i1"]


def test_silence_beyond_two_ttls_is_offline() -> None:
    view = RegistryView()
    view.apply("i1", reg("i1", at=1000, ttl=100))
    assert view.instances(1200)[0].effective_state is AgentState.READY
    assert view.instances(1201)[0].effective_state is AgentState.OFFLINE
    assert view.live(1201) == []


def test_only_ready_instances_are_live() -> None:
    view = RegistryView()
    for i, state in enumerate(AgentState):
        view.apply(f"i{i}", reg(f"i{i}", state=state))
    assert [r.state for r in view.live(1000)] == [AgentState.READY]


def capable(instance: str, *caps: str, at: int = 1000, state: AgentState = AgentState.READY,
            inflight: int = 0) -> AgentRegistration:
    return reg(instance, at=at, state=state, inflight=inflight).model_copy(
        update={"capabilities": [Capability(name=c, version="1.0.0") for c in caps]})


def test_a_plain_heartbeat_keeps_the_shape_and_a_change_moves_it() -> None:
    view = RegistryView()
    view.apply("i1", capable("i1", "x.a"))
    shape = view.shape_version
    view.apply("i1", capable("i1", "x.a", at=2000, inflight=2))  # what a heartbeat changes
    assert view.shape_version == shape
    assert view.serving("x.a")[0].heartbeat_at == 2000  # the index holds the newest registration
    assert view.live(2000)[0].inflight == 2
    view.apply("i1", capable("i1", "x.a", at=3000, state=AgentState.DRAINING))
    assert view.shape_version == shape + 1
    view.apply("i2", capable("i2", "x.a"))
    view.apply("i2", None)
    view.apply("i3", None)  # a tombstone of an unknown instance changes nothing
    assert view.shape_version == shape + 3


def test_instances_are_indexed_by_capability() -> None:
    view = RegistryView()
    view.apply("i1", capable("i1", "x.a", "x.b"))
    view.apply("i2", capable("i2", "x.b"))
    assert sorted(r.instance_id for r in view.serving("x.b")) == ["i1", "i2"]
    view.apply("i1", capable("i1", "x.c"))  # capabilities changed: re-indexed
    assert [r.instance_id for r in view.serving("x.b")] == ["i2"]
    assert [r.instance_id for r in view.serving("x.c")] == ["i1"]
    view.apply("i2", None)
    assert view.serving("x.b") == [] and view.capabilities() == ["x.c"]


def test_a_listing_filters_by_capability_agent_and_state_and_pages() -> None:
    view = RegistryView()
    for i in range(5):
        view.apply(f"i{i}", capable(f"i{i}", "x.a" if i % 2 else "x.b", at=1000 if i else 0))
    where = Where.of({"capability": "x.b", "limit": "1", "offset": "1"})
    page, total = where.page(view, 1000)
    assert total == 3 and [i.registration.instance_id for i in page] == ["i2"]
    offline, total = Where.of({"state": "offline"}).page(view, 1000)
    assert total == 1 and offline[0].registration.instance_id == "i0"
    assert Where.of({"agent": "nobody"}).page(view, 1000) == ([], 0)
    for bad in ({"limit": "0"}, {"offset": "-1"}, {"limit": "x"}, {"state": "ASLEEP"}):
        with pytest.raises(BadQuery):
            Where.of(bad)
