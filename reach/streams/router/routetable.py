"""What the router's hot path reads per capability, kept from batch to batch while nothing it derives from moved.

The live registrations by capability, who serves a capability in which mode (fan-out), each capability's weights and
whether it validates at the router, the canaries and the instances held out by control: derived from the registry
and control views, rebuilt only when either applied a record that changes them (the registry's `shape_version`, which
a plain heartbeat does not move; control's `version`) or a live instance's silence reached
2 x ttl. Before this, each batch rebuilt them: at one or two records a batch (moderate rates), that was a third of the
routing thread's time (docs/decisions/0054). Loads and health change with every receipt; they are read per batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from reach.core import fanout
from reach.core.canarybook import canaries
from reach.core.factors import FactorWeights
from reach.records import AgentRegistration, Canary
from reach.streams.router.state import RouterState


@dataclass
class RouteTable:
    """One derivation of the views; `weights` and `splits` fill per capability as the batches ask."""

    live: tuple[AgentRegistration, ...]
    by_capability: Mapping[str, tuple[AgentRegistration, ...]]
    known: frozenset[str]  # capabilities with a live instance
    canaries: Mapping[str, Canary]
    disabled: frozenset[str]
    stamp: tuple[int, int]  # (registry version, control version) it was derived at
    until: int | None  # ms after which a live instance may have gone silent; None: no live instance
    settings: dict[str, tuple[FactorWeights, bool]] = field(default_factory=dict)  # weights, validate_at_router
    splits: dict[str, fanout.Split] = field(default_factory=dict)  # capability -> its live instances by mode

    @cached_property
    def live_by_id(self) -> dict[str, AgentRegistration]:
        """instance_id -> live registration: what a batch's on-demand loads read from (reach.core.loads)."""
        return {reg.instance_id: reg for reg in self.live}

    def settings_of(self, state: RouterState, capability: str) -> tuple[FactorWeights, bool]:
        """The capability's weights and whether its policy validates payloads at the router."""
        found = self.settings.get(capability)
        if found is None:
            control = state.control
            found = self.settings[capability] = (control.weights(capability),
                                                 control.policy(capability).validate_at_router)
        return found


class RouteTables:
    """The current RouteTable of one router (its routing thread's; the views are written by the state loop)."""

    def __init__(self, state: RouterState) -> None:
        self._state = state
        self._table: RouteTable | None = None

    def at(self, now: int) -> RouteTable:
        """The table for a batch at `now` (ms): the last one while it still holds, else a fresh derivation."""
        state = self._state
        stamp = (state.registry.shape_version, state.control.version)  # not moved by plain heartbeats (0068)
        table = self._table
        if table is not None and table.stamp == stamp and (table.until is None or now <= table.until):
            return table
        live = state.live(now)
        by_capability: dict[str, list[AgentRegistration]] = {}
        for reg in live:  # match() filters by capability anyway; this keeps its loop to the instances that can match
            for name in {c.name for c in reg.capabilities}:
                by_capability.setdefault(name, []).append(reg)
        table = self._table = RouteTable(
            live=tuple(live), by_capability={name: tuple(regs) for name, regs in by_capability.items()},
            known=frozenset(by_capability),
            canaries=canaries(state.control.records()), disabled=state.control.disabled(), stamp=stamp,
            until=state.registry.live_until(live))
        return table
