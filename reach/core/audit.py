"""The audit diff: what changed between two successive records of one key, as AuditEvents (no I/O).

An `AuditBook` holds the last record of every key of the registry, control, health and apps topics; each new
record is diffed against it. Only what an operator or an analyst asks about is an event: an instance's
heartbeat rewrites its registration every few seconds (heartbeat_at, inflight, assigned_partitions) and its
health record every tick (the rolling rates), and none of that is a change. Who made the change comes from the
record: `updated_by` on control and app records, the instance itself for what an agent reports, `reach` for
what the platform did on its own (breakers, outlier ejection, the removal of an obeyed DRAIN).
"""

from __future__ import annotations

import json
from typing import Any

from reach.records import (
    AgentRegistration,
    App,
    AuditEvent,
    AuditKind,
    BreakerState,
    Control,
    ControlKind,
    InstanceHealth,
)

AUTOMATIC = "reach"
"""The actor of a change nobody asked for by name."""

Record = AgentRegistration | Control | InstanceHealth | App

_CONTROL_KIND = {
    ControlKind.WEIGHTS: AuditKind.WEIGHTS,
    ControlKind.INSTANCE: AuditKind.INSTANCE,
    ControlKind.POLICY: AuditKind.POLICY,
    ControlKind.CANARY: AuditKind.CANARY,
    ControlKind.INTENT: AuditKind.INTENT,
}

# Registration fields an operator would call configuration (the rest are the heartbeat's live figures).
_SETTINGS = ("tenants", "region", "weight", "max_concurrency", "max_queue", "qps_limit", "cost", "priority_class",
             "inbox_topic")


def dumps(value: Any) -> str | None:
    """A value as compact, key-sorted JSON (None stays None: nothing before, or nothing after)."""
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _caps(reg: AgentRegistration) -> list[str]:
    return sorted(f"{c.name}@{c.version}" + ("" if c.mode == "handle" else f" ({c.mode})") for c in reg.capabilities)


def _summary(reg: AgentRegistration) -> dict[str, Any]:
    return {"agent_id": reg.agent_id, "build_version": reg.build_version, "capabilities": _caps(reg),
            "state": str(reg.state), **{f: reg.model_dump()[f] for f in _SETTINGS}}


class AuditBook:
    """The last record of every key per topic, and the events each new record makes against it."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], Record] = {}

    def forget(self, stream: str) -> None:
        """Drop every key of `stream` (its partition went to another writer, or is read again)."""
        for key in [k for k in self._last if k[0] == stream]:
            del self._last[key]

    def agent_of(self, instance_id: str) -> str | None:
        reg = self._last.get(("registry", instance_id))
        return reg.agent_id if isinstance(reg, AgentRegistration) else None

    def registration(self, key: str, reg: AgentRegistration | None, *, ts_ms: int, source: str) -> list[AuditEvent]:
        before = self._swap("registry", key, reg)
        assert before is None or isinstance(before, AgentRegistration)
        return registration_events(key, before, reg, ts_ms=ts_ms, source=source)

    def control(self, key: str, control: Control | None, *, ts_ms: int, source: str,
                removed_by: str | None = None) -> list[AuditEvent]:
        if control is not None and not control.understood:
            return []  # a kind or action this reader cannot see: the view keeps the old record, so does the book
        before = self._swap("control", key, control)
        assert before is None or isinstance(before, Control)
        events = control_events(key, before, control, ts_ms=ts_ms, source=source, removed_by=removed_by)
        return [self._with_agent(e) for e in events]

    def health(self, key: str, health: InstanceHealth | None, *, ts_ms: int, source: str) -> list[AuditEvent]:
        before = self._swap("health", key, health)
        assert before is None or isinstance(before, InstanceHealth)
        return health_events(key, before, health, ts_ms=ts_ms, source=source)

    def app(self, key: str, app: App | None, *, ts_ms: int, source: str) -> list[AuditEvent]:
        before = self._swap("apps", key, app)
        assert before is None or isinstance(before, App)
        return app_events(key, before, app, ts_ms=ts_ms, source=source)

    def _swap(self, stream: str, key: str, record: Record | None) -> Record | None:
        before = self._last.pop((stream, key), None)
        if record is not None:
            self._last[(stream, key)] = record
        return before

    def _with_agent(self, event: AuditEvent) -> AuditEvent:
        if event.agent_id is None and event.instance_id is not None:
            return event.model_copy(update={"agent_id": self.agent_of(event.instance_id)})
        return event


def registration_events(key: str, before: AgentRegistration | None, after: AgentRegistration | None, *,
                        ts_ms: int, source: str) -> list[AuditEvent]:
    """JOIN / LEAVE, else one event per changed aspect (version, capabilities, state, settings)."""
    if before is None and after is None:
        return []
    now = after or before
    assert now is not None
    at = after.heartbeat_at if after is not None else ts_ms

    def event(kind: AuditKind, old: Any, new: Any) -> AuditEvent:
        return AuditEvent(at=at, kind=kind, subject=key, agent_id=now.agent_id, instance_id=key, actor=key,
                          before=dumps(old), after=dumps(new), source=source)

    if before is None:
        return [event(AuditKind.JOIN, None, _summary(now))]
    if after is None:
        return [event(AuditKind.LEAVE, _summary(before), None)]
    out = []
    if before.build_version != after.build_version:
        out.append(event(AuditKind.VERSION, before.build_version, after.build_version))
    if _caps(before) != _caps(after):
        out.append(event(AuditKind.CAPABILITIES, _caps(before), _caps(after)))
    if before.state != after.state:
        out.append(event(AuditKind.STATE, str(before.state), str(after.state)))
    old, new = before.model_dump(), after.model_dump()
    changed = [f for f in _SETTINGS if old[f] != new[f]]
    if changed:
        out.append(event(AuditKind.REGISTRATION, {f: old[f] for f in changed}, {f: new[f] for f in changed}))
    return out


def _body(control: Control | None) -> Any:
    if control is None:
        return None
    return control.model_dump(mode="json", exclude={"kind", "scope", "updated_at", "updated_by"}, exclude_none=True)


def control_events(key: str, before: Control | None, after: Control | None, *, ts_ms: int, source: str,
                   removed_by: str | None = None) -> list[AuditEvent]:
    """One event when the body changed (a record re-published as it was is no change). A tombstone has no
    `updated_by`: its actor is `removed_by` (the x-reach-by header `reach intents rm` writes), else `reach` (the
    agent removes the DRAIN it obeyed)."""
    now = after or before
    if now is None or _body(before) == _body(after):
        return []
    kind = _CONTROL_KIND.get(now.kind, AuditKind.UNKNOWN)
    instance = now.scope if now.kind is ControlKind.INSTANCE else None
    agent = now.scope if now.kind is ControlKind.CANARY else None
    return [AuditEvent(at=after.updated_at if after is not None else ts_ms, kind=kind, subject=key,
                       agent_id=agent, instance_id=instance,
                       actor=after.updated_by if after is not None else (removed_by or AUTOMATIC),
                       before=dumps(_body(before)), after=dumps(_body(after)), source=source)]


def _ejection(health: InstanceHealth | None) -> dict[str, Any]:
    if health is None:
        return {"breaker": str(BreakerState.CLOSED), "ejected": False}
    return {"breaker": str(health.breaker), "ejected": health.ejected_until is not None}


def health_events(key: str, before: InstanceHealth | None, after: InstanceHealth | None, *, ts_ms: int,
                  source: str) -> list[AuditEvent]:
    """EJECTED when the breaker opens or an outlier ejection begins; RESTORED when it closes again or the
    ejection ends. Half-open probing and the rolling figures are no event."""
    now = after or before
    if now is None:
        return []
    old, new = _ejection(before), _ejection(after)
    was_out = old["breaker"] == BreakerState.OPEN or old["ejected"]
    is_out = new["breaker"] == BreakerState.OPEN or new["ejected"]
    closed = new["breaker"] == BreakerState.CLOSED and not new["ejected"]
    if not was_out and is_out:
        kind = AuditKind.EJECTED
    elif old != new and closed and (was_out or old["breaker"] == BreakerState.HALF_OPEN):
        kind = AuditKind.RESTORED
    else:
        return []
    reason = after.reason if after is not None else None
    return [AuditEvent(at=after.at if after is not None else ts_ms, kind=kind, subject=key, agent_id=now.agent_id,
                       instance_id=key, actor=AUTOMATIC, before=dumps(old),
                       after=dumps({**new, "reason": reason} if reason else new), source=source)]


def _app(app: App | None) -> Any:
    """An app without its sealed secrets: key ids and their revocation only."""
    if app is None:
        return None
    return {"name": app.name, "tenant": app.tenant, "capabilities": app.capabilities, "rate": app.rate,
            "burst": app.burst, "role": app.role, "revoked_at": app.revoked_at,
            "keys": [{"key_id": k.key_id, "revoked_at": k.revoked_at} for k in app.keys]}


def app_events(key: str, before: App | None, after: App | None, *, ts_ms: int, source: str) -> list[AuditEvent]:
    """APP or OPERATOR (an app record with a role) when anything but a timestamp changed."""
    now = after or before
    if now is None or _app(before) == _app(after):
        return []
    return [AuditEvent(at=after.updated_at if after is not None else ts_ms,
                       kind=AuditKind.OPERATOR if now.role else AuditKind.APP, subject=key,
                       actor=after.updated_by if after is not None else AUTOMATIC,
                       before=dumps(_app(before)), after=dumps(_app(after)), source=source)]


class BadAuditQuery(ValueError):
    """A time range or a kind the audit listing cannot use; the message says what it accepts."""


LISTED_KINDS: tuple[AuditKind, ...] = tuple(k for k in AuditKind if k is not AuditKind.UNKNOWN)


def parse_kinds(values: list[str]) -> frozenset[AuditKind]:
    """`--kind` values (repeated or comma-separated, any case) as kinds; empty means every kind."""
    out = set()
    for value in values:
        for word in (w.strip().upper() for w in value.split(",")):
            if not word:
                continue
            if word not in AuditKind.__members__ or word == AuditKind.UNKNOWN:
                raise BadAuditQuery(f"--kind {word.lower()!r} is not an audit kind. Use one or more of: "
                                    f"{', '.join(k.lower() for k in LISTED_KINDS)}.")
            out.add(AuditKind(word))
    return frozenset(out)


def check_range(since_ms: int | None, until_ms: int | None, now_ms: int) -> None:
    """A range that can hold events: --since not in the future, --until after --since."""
    if since_ms is not None and since_ms > now_ms:
        raise BadAuditQuery("--since is in the future: give an age like 1h or 7d, or a past ISO time.")
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise BadAuditQuery("--until must be later than --since.")


def matches(event: AuditEvent, *, agent: str | None = None, kinds: frozenset[AuditKind] = frozenset(),
            since_ms: int | None = None, until_ms: int | None = None) -> bool:
    """Whether `event` is in the listing: `agent` is an agent id or an instance id (or the scope of a control
    record, such as an instance a DRAIN names or the agent a canary runs for)."""
    if kinds and event.kind not in kinds:
        return False
    if since_ms is not None and event.at < since_ms:
        return False
    if until_ms is not None and event.at >= until_ms:
        return False
    return agent is None or agent in (event.agent_id, event.instance_id, event.subject)
