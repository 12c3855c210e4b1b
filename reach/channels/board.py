"""The channel health board: each channel instance's state and signals, published to Redis, read by `reach channels`
and served as Prometheus gauges by the instance. Health is kept per (tenant, destination): an instance's row shows
its worst one and lists the OPEN ones (`open_destinations`, `tenant/host:port`).

Redis holds what may be lost without losing a message: a snapshot is rewritten every `interval_s` with a TTL of a
few intervals, so a lost or stale key only hides an instance from the board until its next write (an instance
that stopped disappears on its own). Routing does not read the board: an instance whose email or SMS channel is OPEN
fails the requests it cannot hand over with code CHANNEL_OPEN, an OVERLOAD-class failure, so the health writer
opens its instance breaker and the router leaves it out (reach/core/healthmodel/calls.py); a webhook host that is
OPEN fails them with kind DESTINATION, which routing does not count against the instance.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reach.channels.health import ChannelHealth, ChannelState

KEY_PREFIX = "channel-health"
STATE_VALUE = {ChannelState.HEALTHY: 0, ChannelState.DEGRADED: 1, ChannelState.OPEN: 2}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One instance's channel health at `at` (epoch ms); a signal is None with too few samples to grade."""

    channel: str
    instance_id: str
    agent_id: str
    state: str
    breaker: str
    success: float | None
    p95_ms: float | None
    arrival: float | None
    reason: str | None
    since: int  # epoch ms of the breaker's last transition (when an OPEN channel opened)
    at: int
    open_destinations: list[str] = field(default_factory=list)  # `tenant/host:port` (webhook) or `tenant/`


@dataclass(slots=True)
class Counts:
    """What one instance sent since it started: the numerators and denominators of the closure rates (with the
    status fold's `agentreach_callbacks_total` and the gateway's `agentreach_gateway_callbacks_total`)."""

    delivered: int = 0
    reply_urls: int = 0  # outbound messages that carried a reply URL (closure's denominator)
    callbacked: int = 0  # callbacks that reached DELIVERED (callback-effective's numerator)


COUNTERS = (("agentreach_channel_delivered", "Sends the provider confirmed delivered", "delivered"),
            ("agentreach_channel_reply_urls", "Outbound messages that carried a reply URL (/v1/callbacks)",
             "reply_urls"),
            ("agentreach_channel_callbacked", "Callbacks delivered (CALLBACKED on the original message)",
             "callbacked"))


def snapshot(health: ChannelHealth, *, channel: str, instance_id: str, agent_id: str, now: int,
             open_destinations: list[str] | None = None) -> Snapshot:
    """The health's state and signals now (reading the state may trip the breaker, as a send would); an instance
    shows its worst (tenant, destination) and lists the OPEN ones."""
    state = health.state(now)
    success, p95, arrival = health.signals(now)
    return Snapshot(channel=channel, instance_id=instance_id, agent_id=agent_id, state=state.value,
                    breaker=health.breaker.state.value, success=success, p95_ms=p95, arrival=arrival,
                    reason=health.breaker.reason if state is ChannelState.OPEN else None,
                    since=health.breaker.since, at=now, open_destinations=list(open_destinations or []))


def key(namespace: str, instance_id: str) -> str:
    return f"{namespace}:{KEY_PREFIX}:{instance_id}"


def pattern(namespace: str) -> str:
    return f"{namespace}:{KEY_PREFIX}:*"


def encode(snap: Snapshot) -> str:
    return json.dumps(asdict(snap), separators=(",", ":"))


def decode(raw: bytes | str) -> Snapshot | None:
    """A snapshot read back, or None for a value that is not one (skipped, never fatal)."""
    try:
        data = json.loads(raw)
        return Snapshot(**data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None


def rows(snapshots: Iterable[Snapshot]) -> list[dict[str, Any]]:
    """The board as rows, by channel then instance (what `reach channels --json` prints)."""
    return [asdict(s) for s in sorted(snapshots, key=lambda s: (s.channel, s.instance_id))]


class HealthCollector(Collector):
    """Prometheus gauges of one instance's channel health, computed at scrape time."""

    def __init__(self, current: Callable[[], Snapshot], counts: Counts) -> None:
        self._current = current
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        snap = self._current()
        labels = ["channel", "instance_id"]
        values = [snap.channel, snap.instance_id]
        state = GaugeMetricFamily("agentreach_channel_state", "Channel health: 0 HEALTHY, 1 DEGRADED, 2 OPEN",
                                  labels=labels)
        state.add_metric(values, STATE_VALUE[ChannelState(snap.state)])
        yield state
        for name, doc, value in (("agentreach_channel_success_ratio", "Send success over the rolling minute",
                                  snap.success),
                                 ("agentreach_channel_send_p95_seconds", "p95 send latency over the rolling minute",
                                  None if snap.p95_ms is None else snap.p95_ms / 1000),
                                 ("agentreach_channel_report_arrival_ratio",
                                  "Delivery reports arrived / expected over the rolling minute", snap.arrival)):
            family = GaugeMetricFamily(name, doc, labels=labels)
            if value is not None:
                family.add_metric(values, value)
            yield family
        for name, doc, attribute in COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric(values, getattr(self._counts, attribute))
            yield counter
