"""The soak's churn schedule (pure): when an agent restarts, when the router restarts, when the drain and the
canary happen, as offsets from the start of the run."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

AGENT_EVERY_S = 120.0
"""The churned agent instance is restarted (SIGTERM, then a new instance) this often."""


class Action(StrEnum):
    """One churn step; the runner dispatches on it."""

    RESTART_AGENT = "restart agent"
    RESTART_ROUTER = "restart router"
    DRAIN_AGENT = "drain agent"
    CANARY_START = "canary start"
    CANARY_END = "canary end"


@dataclass(frozen=True)
class Event:
    at_s: float
    action: Action


def canary_s(duration_s: float) -> float:
    """How long the mid-run canary lasts: a tenth of the run, within 20-60 s."""
    return min(max(0.1 * duration_s, 20.0), 60.0)


def schedule(duration_s: float, *, agent_every_s: float = AGENT_EVERY_S) -> list[Event]:
    """The router once at a quarter of the run (so the worker that runs the last half lives through it), the drain
    at 40%, a canary from 45% for a tenth of the run (20-60 s), the churned agent every `agent_every_s`;
    nothing in the last 15 s, which belong to the traffic alone."""
    canary = canary_s(duration_s)
    events = [Event(0.25 * duration_s, Action.RESTART_ROUTER), Event(0.40 * duration_s, Action.DRAIN_AGENT),
              Event(0.45 * duration_s, Action.CANARY_START), Event(0.45 * duration_s + canary, Action.CANARY_END)]
    at = agent_every_s
    while at < duration_s:
        events.append(Event(at, Action.RESTART_AGENT))
        at += agent_every_s
    return sorted((e for e in events if e.at_s <= duration_s - 15 or e.action is Action.CANARY_END),
                  key=lambda e: e.at_s)
