"""The registry view: latest registration per instance; silence beyond 2 x ttl reads as OFFLINE.

Indexed for a fleet of thousands (decision 0068): instances by capability (`serving`), and a `shape_version` that
moves only when a record changes what routing reads, not on the heartbeat that only refreshes heartbeat_at and
inflight, so a router's route table is not derived again for each of thousands of heartbeats a second."""

from __future__ import annotations

from dataclasses import dataclass

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
        out = []
        for reg in sorted(self._by_instance.values(), key=lambda r: (r.agent_id, r.instance_id)):
            age = max(0, now_ms - reg.heartbeat_at)
            state = AgentState.OFFLINE if age > 2 * reg.ttl_ms else reg.state
            out.append(InstanceInfo(reg, state, age, reg.inflight / max(1, reg.max_concurrency)))
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
