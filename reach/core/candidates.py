"""Candidate filter: which registered instances may receive a request (pure, no Kafka)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from semver import Version

from reach.core.loads import InstanceLoad
from reach.core.versions import BadVersion, parse_version, satisfies, within_line
from reach.records import AgentRegistration, AgentState, BreakerState, Capability, InstanceHealth


class RouteRequest(NamedTuple):
    """The routing fields of an envelope: everything the router looks at (never the payload).

    A NamedTuple, not a frozen dataclass: one is built per envelope on the router's hot path, and a frozen
    dataclass's __init__ of these 21 fields cost several times more (decision 0054)."""

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
    canary: bool = False
    priority: int = 0  # RoutingHints.priority: the priority scoring factor matches it to instances' priority_class
    callback: str | None = None  # copied onto the router's terminal receipts, so the fold can deliver the callback
    schema_version: str | None = None  # the contract version the intake checked (0075): only its line serves it

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
            canary=bool(routing.get("canary")),
            priority=routing.get("priority") or 0,
            callback=env.get("callback"),
            schema_version=env.get("schema_version"),
        )

    @property
    def serves_range(self) -> str:
        """The versions that may take the request: its range, narrowed to its contract version's line when an intake
        stamped one (an instance outside the line would reject it, decision 0075)."""
        return within_line(self.version_range, self.schema_version)

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


OPEN_RETRY_AFTER_MS = 1_000
"""retry_after_ms for an instance OPEN without an open_until, or HALF_OPEN and not admitting the request."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The filter's answer: instances with room, or (when every match is full) the full matches."""

    candidates: tuple[Candidate, ...]
    overloaded: tuple[Candidate, ...]
    throttled: Mapping[str, int] = field(default_factory=dict)  # instance_id -> ms until its qps bucket refills
    unavailable_ms: int | None = None  # every match's breaker is OPEN: ms until the first one's open_until

    @property
    def all_overloaded(self) -> bool:
        return not self.candidates and bool(self.overloaded)

    @property
    def all_open(self) -> bool:
        return self.unavailable_ms is not None


@dataclass(frozen=True, slots=True)
class Matched:
    """Instances that pass the hard and soft filters, and the OPEN ones left out (instance_id -> open_until)."""

    candidates: tuple[Candidate, ...]
    open: Mapping[str, int | None]

    def unavailable_ms(self, now_ms: int) -> int | None:
        """When nothing but OPEN instances matched: ms until the first may be probed (at least 1), else None."""
        if self.candidates or not self.open:
            return None
        until = [t for t in self.open.values() if t is not None]
        return max(min(until) - now_ms, 1) if until else OPEN_RETRY_AFTER_MS


def is_open(health: InstanceHealth | None, now_ms: int) -> bool:
    """OPEN until open_until (no open_until: until the writer moves it on); UNKNOWN reads as CLOSED."""
    if health is None or health.breaker is not BreakerState.OPEN:
        return False
    return health.open_until is None or health.open_until > now_ms


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


def match(
    request: RouteRequest,
    registrations: Iterable[AgentRegistration],
    *,
    loads: Mapping[str, InstanceLoad] | None = None,
    disabled: Collection[str] = frozenset(),
    health: Mapping[str, InstanceHealth] | None = None,
    now_ms: int = 0,
) -> Matched:
    """Filter instances for a request (docs/architecture.md, step 2), before admission and backpressure.

    Hard filters: capability and a version satisfying the range, READY, owning inbox partitions,
    not drained/disabled by control, tenant, `to_agent`, and a breaker not OPEN (`health`, by
    instance_id). Soft ones: excluded instances and instances lacking a requested tag are dropped
    only while another candidate remains; an OPEN instance never comes back through them. `loads`
    maps instance_id to its current load (default: the heartbeat's inflight, no queue).
    """
    matched: list[Candidate] = []
    opened: dict[str, int | None] = {}
    for reg in registrations:
        if reg.state is not AgentState.READY or not reg.assigned_partitions or not reg.inbox_topic:
            continue
        if reg.instance_id in disabled:
            continue
        if reg.tenants and request.tenant not in reg.tenants:
            continue
        if request.to_agent and reg.agent_id != request.to_agent:
            continue
        cap = matching_capability(reg, request.capability, request.serves_range)
        if cap is None:
            continue
        h = health.get(reg.instance_id) if health else None
        if h is not None and is_open(h, now_ms):
            opened[reg.instance_id] = h.open_until
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
    return Matched(tuple(matched), opened)


def shed(
    candidates: Iterable[Candidate],
    *,
    health: Mapping[str, InstanceHealth] | None = None,
    throttled: Mapping[str, int] | None = None,
) -> Selection:
    """Split admitted candidates by backpressure, then drop health-weight-0 ones while another has room.

    A full instance (busy and its queue at its bound, reach.core.loads) or one over its qps_limit (`throttled`:
    instance_id -> ms until its token bucket has a token) is shed while another has room; when none has
    room every one is `overloaded`. Health weight 0 means eligible only when nothing else is: a slow
    instance with room serves rather than a busy healthy one failing the request with OVERLOAD."""
    pool = list(candidates)
    waits = throttled or {}
    room = tuple(c for c in pool if not c.overloaded and c.instance_id not in waits)
    if room and health:
        weighted = tuple(c for c in room if (h := health.get(c.instance_id)) is None or h.weight > 0)
        room = weighted or room
    if room:
        return Selection(candidates=room, overloaded=())
    return Selection(candidates=(), overloaded=tuple(pool),
                     throttled={c.instance_id: waits[c.instance_id] for c in pool if c.instance_id in waits})


def select(
    request: RouteRequest,
    registrations: Iterable[AgentRegistration],
    *,
    loads: Mapping[str, InstanceLoad] | None = None,
    disabled: Collection[str] = frozenset(),
    health: Mapping[str, InstanceHealth] | None = None,
    throttled: Mapping[str, int] | None = None,
    now_ms: int = 0,
) -> Selection:
    """`match` then `shed`, without admission (reach.core.admission sits between them in reach.core.routing.decide)."""
    matched = match(request, registrations, loads=loads, disabled=disabled, health=health, now_ms=now_ms)
    unavailable = matched.unavailable_ms(now_ms)
    if unavailable is not None:
        return Selection(candidates=(), overloaded=(), unavailable_ms=unavailable)
    return shed(matched.candidates, health=health, throttled=throttled)
