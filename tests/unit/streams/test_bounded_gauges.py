"""The stream app's per-agent series are bounded (decision 0073): past the bound, the agents an operator looks for
keep their names and the rest are summed under `_other`, so sums by state or by group stay exact."""

from __future__ import annotations

from types import SimpleNamespace

from reach.metrics import Metrics
from reach.records import AgentState
from reach.streams.gauges import bounded_lag
from reach.streams.views import OTHER_AGENTS, update_registry_gauges
from tests.unit.routing_fixtures import reg


def _router(*states: tuple[str, AgentState]) -> SimpleNamespace:
    infos = [SimpleNamespace(registration=reg(f"i{n}", agent_id=agent), effective_state=state)
             for n, (agent, state) in enumerate(states)]
    return SimpleNamespace(state=SimpleNamespace(registry=SimpleNamespace(instances=lambda _now: infos)),
                           stats=SimpleNamespace(snapshot=lambda: SimpleNamespace(by_capability={})))


def _series(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {(s.labels["agent_id"], s.labels["state"]): s.value
            for family in metrics.agents.collect() for s in family.samples}


def test_past_the_bound_troubled_agents_keep_their_names_and_the_rest_is_summed() -> None:
    fleet = [(f"agent://a/{n:02d}", AgentState.READY) for n in range(10)] + [("agent://z/late", AgentState.STARTING)]
    metrics = Metrics()
    update_registry_gauges(_router(*fleet), metrics, max_agents=3)  # type: ignore[arg-type]
    series = _series(metrics)
    assert series == {("agent://z/late", "STARTING"): 1.0, ("agent://a/00", "READY"): 1.0,
                      ("agent://a/01", "READY"): 1.0, (OTHER_AGENTS, "READY"): 8.0}
    assert sum(series.values()) == len(fleet)


def test_within_the_bound_every_agent_is_named() -> None:
    metrics = Metrics()
    router = _router(("agent://a/1", AgentState.READY), ("agent://a/1", AgentState.READY))
    update_registry_gauges(router, metrics, max_agents=3)  # type: ignore[arg-type]
    assert _series(metrics) == {("agent://a/1", "READY"): 2.0}


def test_lag_keeps_the_apps_groups_and_the_agents_furthest_behind() -> None:
    lag = {("ns.cap", "router"): 7, **{(f"ns.inbox.{n}", f"g{n}"): n for n in range(6)}}
    out = bounded_lag(lag, fixed={"router"}, max_agents=2)
    assert out == {("ns.cap", "router"): 7, ("ns.inbox.5", "g5"): 5, ("ns.inbox.4", "g4"): 4,
                   (OTHER_AGENTS, OTHER_AGENTS): 0 + 1 + 2 + 3}
    assert bounded_lag(lag, fixed={"router"}, max_agents=6) == lag
