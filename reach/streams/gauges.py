"""Gauges refreshed on a timer: consumer lag from the broker, stale NO_ROUTE letters, registry, table size."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from reach import dlq
from reach.appstore import read_apps
from reach.core.lifecycle import StatusRow, stale_no_route
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import clients
from reach.kafka.types import Consumer
from reach.metrics import Metrics
from reach.names import Names
from reach.records import App
from reach.settings import KafkaSettings
from reach.streams import groupadmin
from reach.streams.lag import consumer_lag
from reach.streams.router.route_loop import Router, router_group
from reach.streams.status.fold import fold_group
from reach.streams.views import MAX_AGENT_LABELS, OTHER_AGENTS, update_registry_gauges

log = logging.getLogger("reach.router")


class Gauges:
    """Blocking refresh (run it in an executor); failures are logged, never raised into the worker."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, router: Router | None, metrics: Metrics,
                 stale_after_ms: int, apps: Callable[[], Mapping[str, App]] | None = None) -> None:
        self._names = names
        self._kafka = kafka
        self._router = router
        self._metrics = metrics
        self._stale_after_ms = stale_after_ms
        self._apps = apps or (lambda: read_apps(names, kafka))
        self._admin: groupadmin.GroupAdmin | None = None
        self._reader: Consumer | None = None

    def update(self, rows: list[StatusRow], table_size: int) -> None:
        """`rows`: the worker's NO_ROUTE dead letters past the threshold (from the fold's no-route index).

        The stale gauge needs the registry too, so a status-only worker (no router) leaves it out."""
        self._metrics.table_size.set(table_size)
        if self._router is not None:
            update_registry_gauges(self._router, self._metrics)
            served = {c.name for reg in self._router.state.live(now_ms()) for c in reg.capabilities}
            stale = stale_no_route(rows, now_ms=now_ms(), threshold_ms=self._stale_after_ms, served=served)
            apps = self._owners() if stale else []
            self._metrics.stale_no_route.clear()
            for capability, count in stale.items():
                tenants = {row.tenant for row in rows if row.capability == capability}
                owners = dlq.app_owners(apps, capability=capability, tenants=tenants)
                self._metrics.stale_no_route.labels(capability, ", ".join(owners)).set(count)
        try:
            self._lag()
        except Exception as exc:  # noqa: BLE001 - lag is observability; the broker may be briefly unavailable
            log.warning("consumer lag not refreshed: %s", exc)

    def _owners(self) -> list[App]:
        """The apps, read only while some letter is stale; unread (an empty owner label) when the topic is not."""
        try:
            return list(self._apps().values())
        except ReachError as exc:
            log.warning("stale NO_ROUTE owners not read: %s", exc)
            return []

    def _lag(self) -> None:
        if self._admin is None or self._reader is None:
            self._admin = groupadmin.shared(self._kafka)  # coordinator requests: in a child (groupadmin)
            self._reader = clients.consumer(f"reach-reader.lag.{uuid.uuid4().hex[:8]}", self._kafka)
        agents = {reg.agent_id for reg in self._router.state.live(now_ms())} if self._router is not None else set()
        groups = [router_group(self._names), self._names.topic("delays"), fold_group(self._names),
                  *(self._names.agent_group(a) for a in sorted(agents))]
        self._metrics.lag.clear()
        for (topic, group), behind in bounded_lag(consumer_lag(self._admin, self._reader, groups),
                                                  fixed=set(groups[:3])).items():
            self._metrics.lag.labels(topic, group).set(behind)


def bounded_lag(lag: dict[tuple[str, str], int], *, fixed: set[str],
                max_agents: int = MAX_AGENT_LABELS) -> dict[tuple[str, str], int]:
    """The stream app's own groups (`fixed`) as they are; of the agents' inbox groups the `max_agents` furthest
    behind, the rest summed under topic and group `_other` (decision 0073: a series per agent grew with the fleet)."""
    agents = sorted(((k, v) for k, v in lag.items() if k[1] not in fixed), key=lambda kv: (-kv[1], kv[0]))
    if len(agents) <= max_agents:
        return lag
    out = {k: v for k, v in lag.items() if k[1] in fixed}
    out.update(agents[:max_agents])
    out[(OTHER_AGENTS, OTHER_AGENTS)] = sum(v for _, v in agents[max_agents:])
    return out
