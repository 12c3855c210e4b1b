"""The stream app's operational views: /agents, /healthz, /metrics, /routing (status views: reach.streams.status)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from reach.core.healthmodel.fields import health_fields
from reach.core.views.registryview import BadQuery, Where
from reach.envelopes import now_ms
from reach.metrics import Metrics
from reach.records import AgentState
from reach.streams.health import HealthWriter
from reach.streams.router.route_loop import Router
from reach.streams.status.fold import StatusFold


def registry_rows(router: Router, where: Where | None = None) -> tuple[list[dict[str, Any]], int]:
    """The registry as `reach agents --json` shows it, with each instance's health (`reach.core.healthmodel.fields`):
    the page `where` asks for (every instance without it), and how many match in all."""
    now = now_ms()
    health = router.state.health
    rows = []
    shown, total = (where.page(router.state.registry, now) if where is not None
                    else (router.state.registry.instances(now), len(router.state.registry)))
    for info in shown:
        reg = info.registration
        rows.append({
            "agent_id": reg.agent_id, "instance_id": reg.instance_id, "state": info.effective_state.value,
            "capabilities": [f"{c.name}@{c.version}" for c in reg.capabilities], "region": reg.region,
            "inflight": reg.inflight, "max_concurrency": reg.max_concurrency, "load": round(info.load, 4),
            "heartbeat_age_ms": info.heartbeat_age_ms, "assigned_partitions": reg.assigned_partitions,
            **health_fields(health.get(reg.instance_id)),
        })
    return rows, total


OTHER_AGENTS = "_other"
"""The `agent_id` of the instances of agents past `max_agents` in `agentreach_agents` (sums by state stay exact)."""
MAX_AGENT_LABELS = 100


def update_registry_gauges(router: Router, metrics: Metrics, *, max_agents: int = MAX_AGENT_LABELS) -> None:
    """Agents by state and READY instances per capability (for the no-READY-instance alert).

    `agentreach_agents` names at most `max_agents` agents (decision 0073: a label per agent grew with the fleet,
    1,200 series and more at 1,200 agents): those with an instance not READY first (the ones an operator looks
    for), then the others in id order; the rest are counted under agent_id `_other`, by state."""
    now = now_ms()
    by_state: Counter[tuple[str, str]] = Counter()
    ready: Counter[str] = Counter()
    for info in router.state.registry.instances(now):
        reg = info.registration
        by_state[(reg.agent_id, info.effective_state.value)] += 1
        if info.effective_state is AgentState.READY:
            for capability in reg.capabilities:
                ready[capability.name] += 1
    agents = {agent_id for agent_id, _ in by_state}
    if len(agents) > max_agents:
        troubled = {agent_id for agent_id, state in by_state if state != AgentState.READY.value}
        named = set(sorted(agents, key=lambda a: (a not in troubled, a))[:max_agents])
        folded: Counter[tuple[str, str]] = Counter()
        for (agent_id, state), count in by_state.items():
            folded[(agent_id if agent_id in named else OTHER_AGENTS, state)] += count
        by_state = folded
    metrics.agents.clear()
    for (agent_id, state), count in by_state.items():
        metrics.agents.labels(agent_id, state).set(count)
    for name in set(ready) | set(router.stats.snapshot().by_capability):
        metrics.ready.labels(name).set(ready.get(name, 0))


def attach_views(app: Any, router: Router | None, metrics: Metrics, fold: StatusFold | None = None,
                 health: HealthWriter | None = None) -> None:
    """Mount the views; a part this worker does not run (router or status fold) is left out of them."""

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        parts = {}
        if router is not None:
            parts["router"] = "running" if router.healthy() else "stopped"
        if fold is not None:
            parts["status"] = "running" if fold.healthy() else "stopped"
        if health is not None:
            parts["health"] = "running" if health.healthy() else "stopped"
        healthy = all(state == "running" for state in parts.values())
        return web.json({"ok": healthy, **parts}, status=200 if healthy else 503)

    @app.page("/metrics")
    async def prometheus(web: Any, request: Any) -> Any:
        if router is not None:
            update_registry_gauges(router, metrics)
        return web.bytes(metrics.exposition(), content_type="text/plain; version=0.0.4")

    if router is None:
        return

    @app.page("/agents")
    async def agents(web: Any, request: Any) -> Any:
        try:  # a page of 500 unless asked (decision 0068); X-Total-Count says how many match
            where = Where.of(request.query, limit=500)
        except BadQuery as exc:
            return web.json({"error": str(exc)}, status=400)
        rows, total = registry_rows(router, where)
        return web.json(rows, headers={"X-Total-Count": str(total)})

    @app.page("/routing")
    async def stats_view(web: Any, request: Any) -> Any:
        snap = router.stats.snapshot()
        return web.json({"healthy": router.healthy(), "totals": dict(snap.totals),
                         "by_capability": {k: dict(v) for k, v in snap.by_capability.items()}})
