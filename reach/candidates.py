"""Candidate filter: which registered instances may receive a request (pure, no Kafka)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from semver import Version

from reach.loads import InstanceLoad
from reach.records import AgentRegistration, AgentState, Capability
from reach.versions import BadVersion, parse_version, satisfies


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """The routing fields of an envelope: everything the router looks at (never the payload)."""

    message_id: str
    capability: str
    version_range: str = "*"
    tenant: str = "default"
    to_agent: str | None = None
    region: str | None = None
    session_key: str | None = None
    tags: tuple[str, ...] = ()
    excluded_instances: frozenset[str] = frozenset()
    expire_at: int | None = None
    deadline: int | None = None
    generation: int = 0
    attempt: int = 1
    trace_id: str = ""
    reply_to: str | None = None
    content_type: str = "application/json"
    delivery_timeout_ms: int | None = None
    reroutes: int = 0
    priority: int = 0  # RoutingHints.priority: the priority scoring factor matches it to instances' priority_class

    @classmethod
    def from_envelope(cls, env: Mapping[str, Any]) -> RouteRequest:
        """Read the routing fields of a decoded Envelope dict (codec.decode_dict output)."""
        routing = env.get("routing") or {}
        return cls(
            message_id=env["message_id"],
            capability=env.get("capability") or "",
            version_range=env.get("capability_version") or "*",
            tenant=env.get("tenant") or "",
            to_agent=env.get("to_agent"),
            region=routing.get("region"),
            session_key=routing.get("session_key"),
            tags=tuple(routing.get("tags") or ()),
            excluded_instances=frozenset(env.get("excluded_instances") or ()),
            expire_at=env.get("expire_at"),
            deadline=env.get("deadline"),
            generation=env.get("generation", 0),
            attempt=env.get("attempt", 1),
            trace_id=env.get("trace_id") or "",
            reply_to=env.get("reply_to"),
            content_type=env.get("content_type") or "application/json",
            delivery_timeout_ms=env.get("delivery_timeout_ms"),
            reroutes=env.get("reroutes", 0),
            priority=routing.get("priority") or 0,
        )

    @property
    def routing_key(self) -> str:
        """Capability and inbox topics are keyed by session_key, else message_id."""
        return self.session_key or self.message_id


class Candidate(NamedTuple):
    """An instance that can serve the request, with the capability entry it matched and its load.

    A NamedTuple for the same reason as scoring.ScoreParts: one per matching instance per request."""

    registration: AgentRegistration
    capability: Capability
    version: Version
    load: InstanceLoad

    @property
    def instance_id(self) -> str:
        return self.registration.instance_id

    @property
    def agent_id(self) -> str:
        return self.registration.agent_id

    @property
    def load_ratio(self) -> float:
        return self.load.ratio

    @property
    def overloaded(self) -> bool:
        return self.load.full


@dataclass(frozen=True, slots=True)
class Selection:
    """The filter's answer: instances with room, or (when every match is full) the full matches."""

    candidates: tuple[Candidate, ...]
    overloaded: tuple[Candidate, ...]

    @property
    def all_overloaded(self) -> bool:
        return not self.candidates and bool(self.overloaded)


@lru_cache(maxsize=4096)
def _parsed(version: str) -> Version | None:
    try:
        return parse_version(version)
    except BadVersion:
        return None


@lru_cache(maxsize=16384)
def _compatible(version: str, range_text: str) -> bool:
    parsed = _parsed(version)
    return parsed is not None and satisfies(parsed, range_text)


def matching_capability(registration: AgentRegistration, name: str, range_text: str) -> Capability | None:
    """The highest declared version of capability `name` that satisfies the range, if any."""
    best: Capability | None = None
    best_version: Version | None = None
    for cap in registration.capabilities:
        if cap.name != name or not _compatible(cap.version, range_text):
            continue
        version = _parsed(cap.version)
        if best_version is None or (version is not None and version > best_version):
            best, best_version = cap, version
    return best


def select(
    request: RouteRequest,
    registrations: Iterable[AgentRegistration],
    *,
    loads: Mapping[str, InstanceLoad] | None = None,
    disabled: Collection[str] = frozenset(),
) -> Selection:
    """Filter instances for a request (docs/architecture.md, step 2) and split them by backpressure.

    Hard filters: capability and a version satisfying the range, READY, owning inbox partitions,
    not drained/disabled by control, tenant, `to_agent`. Soft ones: excluded instances and
    instances lacking a requested tag are dropped only while another candidate remains. `loads`
    maps instance_id to its current load (default: the heartbeat's inflight, no queue); a full
    instance (busy and its queue at its bound, reach.loads) is shed while another has room.
    """
    matched: list[Candidate] = []
    for reg in registrations:
        if reg.state is not AgentState.READY or not reg.assigned_partitions or not reg.inbox_topic:
            continue
        if reg.instance_id in disabled:
            continue
        if reg.tenants and request.tenant not in reg.tenants:
            continue
        if request.to_agent and reg.agent_id != request.to_agent:
            continue
        cap = matching_capability(reg, request.capability, request.version_range)
        if cap is None:
            continue
        load = (loads or {}).get(reg.instance_id) or InstanceLoad.of(reg)
        matched.append(Candidate(reg, cap, _parsed(cap.version) or Version(0), load))
    if request.excluded_instances:
        kept = [c for c in matched if c.instance_id not in request.excluded_instances]
        matched = kept or matched
    if request.tags:
        wanted = set(request.tags)
        tagged = [c for c in matched if wanted <= set(c.capability.tags)]
        matched = tagged or matched
    room = tuple(c for c in matched if not c.overloaded)
    if room:
        return Selection(candidates=room, overloaded=())
    return Selection(candidates=(), overloaded=tuple(matched))
