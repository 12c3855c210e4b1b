"""The registry view: latest registration per instance; silence beyond 2 x ttl reads as OFFLINE.

Indexed for a fleet of thousands (decision 0068): instances by capability (`serving`), and a `shape_version` that
moves only when a record changes what routing reads, not on the heartbeat that only refreshes heartbeat_at and
inflight, so a router's route table is not derived again for each of thousands of heartbeats a second."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reach.errors import ReachError
from reach.records import AgentRegistration, AgentState


@dataclass(frozen=True)
class InstanceInfo:
    """One instance as seen now: its last registration, effective state, heartbeat age and load."""

    registration: AgentRegistration
    effective_state: AgentState
    heartbeat_age_ms: int
    load: float


class RegistryView:
    """Latest registration per instance (no I/O); silent for more than 2 x ttl means OFFLINE."""

    def __init__(self) -> None:
        self._by_instance: dict[str, AgentRegistration] = {}
        self._by_capability: dict[str, dict[str, AgentRegistration]] = {}
        self.version = 0
        """Moves on every record applied."""
        self.shape_version = 0
        """Moves when an instance comes, goes, or changes anything but heartbeat_at and inflight: a reader's cache
        of `live` holds while it is the same and no live instance's silence reaches 2 x ttl (`live_until`, which a
        cached older heartbeat only brings forward). Loads come from the heartbeats through the load tracker."""

    def apply(self, instance_id: str, registration: AgentRegistration | None) -> None:
        """Take one registry record; None (a tombstone) removes the instance."""
        self.version += 1
        old = self._by_instance.get(instance_id)
        if registration is None:
            if old is not None:
                self._by_instance.pop(instance_id)
                self._unindex(old)
                self.shape_version += 1
            return
        self._by_instance[instance_id] = registration
        if old is not None and _same_shape(old, registration):
            for name in {c.name for c in registration.capabilities}:
                self._by_capability[name][instance_id] = registration
            return
        if old is not None:
            self._unindex(old)
        for name in {c.name for c in registration.capabilities}:
            self._by_capability.setdefault(name, {})[instance_id] = registration
        self.shape_version += 1

    def _unindex(self, registration: AgentRegistration) -> None:
        for name in {c.name for c in registration.capabilities}:
            serving = self._by_capability.get(name)
            if serving is not None:
                serving.pop(registration.instance_id, None)
                if not serving:
                    del self._by_capability[name]

    def serving(self, capability: str) -> list[AgentRegistration]:
        """The registrations declaring `capability` (any version, any state), without scanning the fleet."""
        return list(self._by_capability.get(capability, {}).values())

    def capabilities(self) -> list[str]:
        """Every capability some registered instance declares, sorted."""
        return sorted(self._by_capability)

    def instances(self, now_ms: int) -> list[InstanceInfo]:
        """Every known instance, sorted by agent id then instance id."""
        return self.select(now_ms)

    def select(self, now_ms: int, *, capability: str | None = None, agent: str | None = None,
               state: AgentState | None = None) -> list[InstanceInfo]:
        """The instances of `instances`, narrowed: declaring `capability` (through the index, not a scan), with an
        agent id containing `agent`, in effective `state`."""
        regs = self.serving(capability) if capability else list(self._by_instance.values())
        out = []
        for reg in sorted(regs, key=lambda r: (r.agent_id, r.instance_id)):
            if agent and agent not in reg.agent_id:
                continue
            age = max(0, now_ms - reg.heartbeat_at)
            effective = AgentState.OFFLINE if age > 2 * reg.ttl_ms else reg.state
            if state is None or effective is state:
                out.append(InstanceInfo(reg, effective, age, reg.inflight / max(1, reg.max_concurrency)))
        return out

    def live(self, now_ms: int) -> list[AgentRegistration]:
        """Registrations that may take work: READY and heard from within 2 x ttl."""
        return [i.registration for i in self.instances(now_ms) if i.effective_state is AgentState.READY]

    @staticmethod
    def live_until(live: list[AgentRegistration]) -> int | None:
        """The first time (ms) one of these live registrations turns OFFLINE by silence, unless heard from again."""
        return min((reg.heartbeat_at + 2 * reg.ttl_ms for reg in live), default=None)

    def __len__(self) -> int:
        return len(self._by_instance)


def _same_shape(old: AgentRegistration, new: AgentRegistration) -> bool:
    """Whether `new` differs from `old` in heartbeat_at and inflight at most (what a plain heartbeat changes)."""
    if old.state is not new.state or old.assigned_partitions != new.assigned_partitions:
        return False  # the usual changes, seen without comparing every field
    return old.model_copy(update={"heartbeat_at": new.heartbeat_at, "inflight": new.inflight}) == new


class BadQuery(ReachError):
    """A listing asked with a bad filter or page (a usage error, 400 over HTTP)."""


PAGE = 100
"""Instances per page when the asker names no limit: a fleet of thousands is paged, never listed whole."""
MAX_PAGE = 5_000


@dataclass(frozen=True)
class Where:
    """Which instances a listing shows (capability, a part of the agent id, effective state) and which page of them;
    `reach agents`, `/agents` and the console's Agents page take the same fields (decision 0068)."""

    capability: str | None = None
    agent: str | None = None
    state: AgentState | None = None
    offset: int = 0
    limit: int = PAGE

    @classmethod
    def of(cls, query: Mapping[str, str], *, limit: int = PAGE) -> Where:
        """From query parameters (capability, agent, state, offset, limit); a bad one is BadQuery."""
        try:
            offset, limit = int(query.get("offset") or 0), int(query.get("limit") or limit)
        except ValueError:
            raise BadQuery("offset and limit must be whole numbers") from None
        state = (query.get("state") or "").upper() or None
        if state is not None and state not in AgentState.__members__:
            raise BadQuery(f"state must be one of {', '.join(AgentState.__members__)}, not {state!r}")
        if offset < 0 or not 0 < limit <= MAX_PAGE:
            raise BadQuery(f"offset must be >= 0 and limit from 1 to {MAX_PAGE:,}")
        return cls(capability=query.get("capability") or None, agent=query.get("agent") or None,
                   state=AgentState[state] if state else None, offset=offset, limit=limit)

    def page(self, view: RegistryView, now: int) -> tuple[list[InstanceInfo], int]:
        """This page of the view's matching instances, and how many match in all."""
        found = view.select(now, capability=self.capability, agent=self.agent, state=self.state)
        return found[self.offset:self.offset + self.limit], len(found)
