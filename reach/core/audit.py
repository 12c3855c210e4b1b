"""The audit diff: what changed between two successive records of one key, as AuditEvents (no I/O).

An `AuditBook` holds, per key of the registry, control, health and apps topics, the *audited view* of its last
record: the part an event reports (a registration's version, capabilities, state and settings; a control
record's body; a breaker's state; an app without its secrets). Each new record is diffed against it. An
instance's heartbeat rewrites its registration every few seconds (heartbeat_at, inflight) and its health record
every tick (the rolling rates): none of that is in the view, so none of it is an event.

The view of a key is exactly what its audit events say, so the book can be rebuilt from the audit topic itself
(`seed`): a restarted writer diffs against what it last appended, even after compaction removed the records it
read (the registry keeps only the last record of each key; the audit topic is not compacted). What the audit
topic no longer holds (older than its retention) comes from the compacted topics' records read before the
writer's committed offset (`replay`).

An instance that stops heartbeating writes no record (only a clean exit tombstones its registration), yet the
registry reads it as OFFLINE after 2 x ttl of silence (reach.core.views.registryview): `evictions` turns that silence
into an EVICTED event, actor `reach`, once per silence (the view then holds OFFLINE, so a seeded book does not
append it again; a later heartbeat is a STATE change back, by the instance).

Who made the change comes from the record: `updated_by` on control and app records, the instance itself for
what an agent reports, `reach` for what the platform did on its own (breakers, outlier ejection, the removal of
an obeyed DRAIN).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from reach.records import (
    AgentRegistration,
    AgentState,
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

View = dict[str, Any]

_CONTROL_KIND = {
    ControlKind.WEIGHTS: AuditKind.WEIGHTS,
    ControlKind.INSTANCE: AuditKind.INSTANCE,
    ControlKind.POLICY: AuditKind.POLICY,
    ControlKind.CANARY: AuditKind.CANARY,
    ControlKind.INTENT: AuditKind.INTENT,
    ControlKind.INTENT_FEEDBACK: AuditKind.INTENT,
}
_REGISTRY_KINDS = {AuditKind.JOIN, AuditKind.LEAVE, AuditKind.VERSION, AuditKind.CAPABILITIES, AuditKind.STATE,
                   AuditKind.REGISTRATION, AuditKind.EVICTED}
SILENT_TTLS = 2  # silence beyond this many ttl reads as OFFLINE, in the registry view and here
_HEALTH_KINDS = {AuditKind.EJECTED, AuditKind.RESTORED}
_APP_KINDS = {AuditKind.APP, AuditKind.OPERATOR}
# the registration field each registry kind reports (REGISTRATION: several, as a dict)
_FIELD_OF = {AuditKind.VERSION: "build_version", AuditKind.CAPABILITIES: "capabilities", AuditKind.STATE: "state"}

# Registration fields an operator would call configuration (the rest are the heartbeat's live figures).
_SETTINGS = ("tenants", "region", "weight", "max_concurrency", "max_queue", "qps_limit", "cost", "priority_class",
             "inbox_topic")


def dumps(value: Any) -> str | None:
    """A value as compact, key-sorted JSON (None stays None: nothing before, or nothing after)."""
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def registration_view(reg: AgentRegistration | None) -> View | None:
    if reg is None:
        return None
    caps = sorted(f"{c.name}@{c.version}" + ("" if c.mode == "handle" else f" ({c.mode})") for c in reg.capabilities)
    dumped = reg.model_dump(mode="json")
    return {"agent_id": reg.agent_id, "build_version": reg.build_version, "capabilities": caps,
            "state": str(reg.state), **{f: dumped[f] for f in _SETTINGS}}


def control_view(control: Control | None) -> View | None:
    if control is None:
        return None
    return control.model_dump(mode="json", exclude={"kind", "scope", "updated_at", "updated_by"}, exclude_none=True)


def health_view(health: InstanceHealth | None) -> View:
    if health is None:
        return {"breaker": str(BreakerState.CLOSED), "ejected": False}
    return {"breaker": str(health.breaker), "ejected": health.ejected_until is not None}


def app_view(app: App | None) -> View | None:
    """An app without its sealed secrets: key ids and their revocation only."""
    if app is None:
        return None
    return {"name": app.name, "tenant": app.tenant, "capabilities": list(app.capabilities), "rate": app.rate,
            "burst": app.burst, "role": app.role, "revoked_at": app.revoked_at,
            "keys": [{"key_id": k.key_id, "revoked_at": k.revoked_at} for k in app.keys],
            # App v3: spend limits, only when set (an app without them keeps the view it always had)
            **({"limits": [limit.model_dump() for limit in app.limits]} if app.limits else {})}


def stream_of(kind: AuditKind) -> str | None:
    """The topic family an event kind comes from (registry, control, health, apps)."""
    if kind in _REGISTRY_KINDS:
        return "registry"
    if kind in _HEALTH_KINDS:
        return "health"
    if kind in _APP_KINDS:
        return "apps"
    return "control" if kind in _CONTROL_KIND.values() else None


class AuditBook:
    """The audited view of the last record of every key per topic, and the events each new record makes."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, str], View] = {}
        self._seeded: set[tuple[str, str]] = set()  # keys the audit topic speaks for: replay leaves them alone
        self._agents: dict[str, str] = {}  # instance id -> agent id, as last seen
        self._heard: dict[str, tuple[int, int]] = {}  # instance id -> (heartbeat_at, ttl_ms) of its last record

    def seed(self, event: AuditEvent) -> None:
        """Apply one event read back from the audit topic: the view becomes what the event says it became."""
        stream = stream_of(event.kind)
        if stream is None:
            return
        slot = (stream, event.subject)
        self._seeded.add(slot)
        after = _loads(event.after)
        if event.agent_id and event.instance_id:
            self._agents[event.instance_id] = event.agent_id
        if event.kind in _FIELD_OF or event.kind in (AuditKind.REGISTRATION, AuditKind.EVICTED):
            view = self._views.get(slot)
            if view is not None and event.kind is AuditKind.EVICTED:
                view["state"] = (after or {}).get("state", str(AgentState.OFFLINE))
            elif view is not None:
                view.update({_FIELD_OF[event.kind]: after} if event.kind in _FIELD_OF else after or {})
            return
        if stream == "health":
            after = {k: after[k] for k in ("breaker", "ejected")} if after else None
        self._set(slot, after)

    def agent_of(self, instance_id: str) -> str | None:
        return self._agents.get(instance_id)

    def registration(self, key: str, reg: AgentRegistration | None, *, ts_ms: int, source: str,
                     replay: bool = False) -> list[AuditEvent]:
        if reg is not None:
            self._agents[key] = reg.agent_id
            self._heard[key] = (reg.heartbeat_at, reg.ttl_ms)
        else:
            self._heard.pop(key, None)
        before = self._move(("registry", key), registration_view(reg), replay)
        if replay:
            return []
        at = reg.heartbeat_at if reg is not None else ts_ms
        return registration_events(key, before, registration_view(reg), at=at, source=source)

    def evictions(self, keys: Iterable[str], *, now_ms: int) -> list[AuditEvent]:
        """EVICTED for each of `keys` (instances whose registry partition this writer has read to its end) silent
        for more than 2 x ttl and not OFFLINE in its view yet; the view becomes OFFLINE."""
        events = []
        for key in keys:
            heard, view = self._heard.get(key), self._views.get(("registry", key))
            if heard is None or view is None or view["state"] == AgentState.OFFLINE:
                continue
            beat, ttl = heard
            if now_ms - beat <= SILENT_TTLS * ttl:
                continue
            events.append(AuditEvent(
                at=beat + SILENT_TTLS * ttl, kind=AuditKind.EVICTED, subject=key, agent_id=view["agent_id"],
                instance_id=key, actor=AUTOMATIC, before=dumps({"state": view["state"], "heartbeat_at": beat}),
                after=dumps({"state": str(AgentState.OFFLINE),
                             "reason": f"no heartbeat for more than {SILENT_TTLS} x ttl ({SILENT_TTLS * ttl} ms)"}),
                source="silence"))
            view["state"] = str(AgentState.OFFLINE)
        return events

    def control(self, key: str, control: Control | None, *, ts_ms: int, source: str, removed_by: str | None = None,
                replay: bool = False) -> list[AuditEvent]:
        if control is not None and not control.understood:
            return []  # a kind or action this reader cannot see: the view keeps the old record, so does the book
        before = self._move(("control", key), control_view(control), replay)
        if replay:
            return []
        actor = control.updated_by if control is not None else (removed_by or AUTOMATIC)
        events = control_events(key, before, control_view(control), at=control.updated_at if control else ts_ms,
                                actor=actor, source=source)
        return [e.model_copy(update={"agent_id": self.agent_of(e.instance_id)})
                if e.agent_id is None and e.instance_id is not None else e for e in events]

    def health(self, key: str, health: InstanceHealth | None, *, ts_ms: int, source: str,
               replay: bool = False) -> list[AuditEvent]:
        before = self._move(("health", key), health_view(health) if health is not None else None, replay)
        if replay:
            return []
        agent = health.agent_id if health is not None else self.agent_of(key)
        return health_events(key, before or health_view(None), health, agent_id=agent, ts_ms=ts_ms, source=source)

    def app(self, key: str, app: App | None, *, ts_ms: int, source: str, replay: bool = False) -> list[AuditEvent]:
        before = self._move(("apps", key), app_view(app), replay)
        if replay:
            return []
        return app_events(key, before, app, ts_ms=ts_ms, source=source)

    def _move(self, slot: tuple[str, str], view: View | None, replay: bool) -> View | None:
        """The view before, and `view` in its place; a replayed record does not override the audit's word."""
        before = self._views.get(slot)
        if not (replay and slot in self._seeded):
            self._set(slot, view)
        return before

    def _set(self, slot: tuple[str, str], view: View | None) -> None:
        if view is None:
            self._views.pop(slot, None)
        else:
            self._views[slot] = dict(view)


def registration_events(key: str, before: View | None, after: View | None, *, at: int,
                        source: str) -> list[AuditEvent]:
    """JOIN / LEAVE, else one event per changed aspect (version, capabilities, state, settings)."""
    now = after or before
    if now is None:
        return []

    def event(kind: AuditKind, old: Any, new: Any) -> AuditEvent:
        return AuditEvent(at=at, kind=kind, subject=key, agent_id=now["agent_id"], instance_id=key, actor=key,
                          before=dumps(old), after=dumps(new), source=source)

    if before is None:
        return [event(AuditKind.JOIN, None, after)]
    if after is None:
        return [event(AuditKind.LEAVE, before, None)]
    out = [event(kind, before[field], after[field]) for kind, field in _FIELD_OF.items()
           if before.get(field) != after[field]]
    changed = [f for f in _SETTINGS if before.get(f) != after[f]]
    if changed:
        out.append(event(AuditKind.REGISTRATION, {f: before.get(f) for f in changed}, {f: after[f] for f in changed}))
    return out


def control_events(key: str, before: View | None, after: View | None, *, at: int, actor: str,
                   source: str) -> list[AuditEvent]:
    """One event when the body changed (a record re-published as it was is no change). A tombstone has no
    `updated_by`: the caller names its actor (the x-reach-by header `reach intents rm` writes, else `reach`: the
    agent removes the DRAIN it obeyed)."""
    if before == after:
        return []
    name, _, scope = key.partition(":")
    kind = _CONTROL_KIND.get(ControlKind(name) if name in ControlKind.__members__ else ControlKind.UNKNOWN,
                             AuditKind.UNKNOWN)
    return [AuditEvent(at=at, kind=kind, subject=key, agent_id=scope if kind is AuditKind.CANARY else None,
                       instance_id=scope if kind is AuditKind.INSTANCE else None, actor=actor,
                       before=dumps(before), after=dumps(after), source=source)]


def health_events(key: str, before: View, after: InstanceHealth | None, *, agent_id: str | None, ts_ms: int,
                  source: str) -> list[AuditEvent]:
    """EJECTED when the breaker opens or an outlier ejection begins; RESTORED when it closes again or the
    ejection ends. Half-open probing and the rolling figures are no event."""
    new = health_view(after)
    was_out = before["breaker"] == BreakerState.OPEN or before["ejected"]
    is_out = new["breaker"] == BreakerState.OPEN or new["ejected"]
    closed = new["breaker"] == BreakerState.CLOSED and not new["ejected"]
    if not was_out and is_out:
        kind = AuditKind.EJECTED
    elif before != new and closed and (was_out or before["breaker"] == BreakerState.HALF_OPEN):
        kind = AuditKind.RESTORED
    else:
        return []
    reason = after.reason if after is not None else None
    return [AuditEvent(at=after.at if after is not None else ts_ms, kind=kind, subject=key, agent_id=agent_id,
                       instance_id=key, actor=AUTOMATIC, before=dumps(before),
                       after=dumps({**new, "reason": reason} if reason else new), source=source)]


def app_events(key: str, before: View | None, after: App | None, *, ts_ms: int, source: str) -> list[AuditEvent]:
    """APP or OPERATOR (an app record with a role) when anything but a timestamp or a sealed secret changed."""
    new = app_view(after)
    now = new or before
    if now is None or before == new:
        return []
    return [AuditEvent(at=after.updated_at if after is not None else ts_ms,
                       kind=AuditKind.OPERATOR if now["role"] else AuditKind.APP, subject=key,
                       actor=after.updated_by if after is not None else AUTOMATIC,
                       before=dumps(before), after=dumps(new), source=source)]


ASSERTED = "asserted"
"""An actor the writer of the record named itself: the CLI's `reach-cli:<name>` (REACH_OPERATOR, else the OS user;
anyone with write access to the control topics can name anyone), an app id on its own record, an instance on what
it reports."""
AUTHENTICATED = "authenticated"
"""An actor the product checked: `console:<operator>`, an operator logged in to the console with its token."""
PLATFORM = "platform"
"""`reach`: a change the platform made on its own (breakers, ejections, evictions)."""


def actor_source(actor: str) -> str:
    """How far the audit history's `actor` can be believed: AUTHENTICATED, PLATFORM or ASSERTED (decision 0060)."""
    if actor == AUTOMATIC:
        return PLATFORM
    if actor.startswith("console:") and len(actor) > len("console:"):
        return AUTHENTICATED
    return ASSERTED


OPERATIONS = frozenset({AuditKind.REDRIVE, AuditKind.HANDOFF, AuditKind.CANCEL})
"""Kinds the operations layer appends itself (no record to diff): nothing a seeded book keeps a view of."""


def operation(kind: AuditKind, message_id: str, *, actor: str, at: int, after: dict[str, Any]) -> AuditEvent:
    """An operation on one message (a redrive, a handoff move, a cancel) as the audit event the operations layer
    appends: subject the message id, `after` what was done (never a payload or an answer's text)."""
    if kind not in OPERATIONS:
        raise ValueError(f"{kind} is not an operation kind ({', '.join(sorted(OPERATIONS))})")
    return AuditEvent(at=at, kind=kind, subject=message_id, actor=actor, after=dumps(after), source="ops")


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
