"""The registry view: latest registration per instance; silence beyond 2 x ttl reads as OFFLINE."""

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
        self.version = 0
        """Moves on every record applied: a reader's cache of `live` holds while it is the same (and no live
        instance's silence reaches 2 x ttl: `live_until`)."""

    def apply(self, instance_id: str, registration: AgentRegistration | None) -> None:
        """Take one registry record; None (a tombstone) removes the instance."""
        self.version += 1
        if registration is None:
            self._by_instance.pop(instance_id, None)
        else:
            self._by_instance[instance_id] = registration

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
