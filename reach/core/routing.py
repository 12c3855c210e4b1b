"""The routing decision: filter, score and pick, as a pure function returning an outcome value."""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from reach.core import allowance
from reach.core.admission import admit
from reach.core.backlog import Queued, Waits, queue_behind, remaining_budget_ms
from reach.core.candidates import OPEN_RETRY_AFTER_MS, Candidate, Matched, RouteRequest, Selection, match, shed
from reach.core.factors import FactorWeights, ScoringContext, as_factor_weights, sticky_instance
from reach.core.loads import InstanceLoad, retry_after_ms
from reach.core.scoring import ScoreBoard, ScoredDecision, ScoreParts, score, score_all
from reach.core.versions import BadVersion, parse_range
from reach.names import check_capability
from reach.records import AgentRegistration, Canary, InstanceHealth, Weights


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the envelope to `partition` of `topic`, owned by the picked instance.

    The original bytes, except when `timeout_factor` > 1 (a slow instance serving as the sole candidate):
    then the envelope goes re-encoded with its execution timeout multiplied by it. `arm` and `admission`
    are Decision.arm and Decision.admission of the ROUTED receipt; `delivery_timeout_ms`, when set, its delivery timeout
    (the request waits in the instance's queue: not the request's own, reach.core.backlog)."""

    decision: ScoredDecision
    topic: str
    partition: int
    admission: str | None = None  # Decision.admission: who admission left out before scoring and why, if any
    timeout_factor: float = 1.0
    delivery_timeout_ms: int | None = None  # the ROUTED receipt's when it queues (reach.core.backlog), else None

    @property
    def arm(self) -> str | None:
        """Decision.arm: the picked instance's canary arm (None when its agent runs no canary)."""
        return self.decision.arm

    @property
    def instance(self) -> AgentRegistration:
        return self.decision.picked.registration


@dataclass(frozen=True, slots=True)
class Overload:
    """Every matching instance is busy and its queue full, and none can start and finish the request within its
    budget (reach.core.backlog): fail fast with a hint from the drain rates."""

    retry_after_ms: int
    scores: tuple[ScoreParts, ...]
    weights: FactorWeights
    message: str


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Every matching instance's breaker is OPEN (or HALF_OPEN and not probing with this request): fail fast,
    FAILED / UNAVAILABLE, retry after the first open_until, instead of feeding a retry storm."""

    retry_after_ms: int
    message: str


@dataclass(frozen=True, slots=True)
class NoRoute:
    """No instance can serve the request; dead-letter it while its expire_at is in the future."""

    dead_letter: bool
    message: str


@dataclass(frozen=True, slots=True)
class Reject:
    """The envelope itself is faulty (code: UNDECODABLE, UNKNOWN_SCHEMA, EMPTY_CAPABILITY, ...)."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Expired:
    """The request's total budget (deadline) was spent before it could be routed."""

    message: str


RouteOutcome = Forward | Overload | Unavailable | NoRoute | Reject | Expired


def parse_request(envelope: Mapping[str, Any]) -> RouteRequest | Reject:
    """The routing fields of a decoded envelope, or a Reject naming what is wrong with it."""
    capability = envelope.get("capability") or ""
    if not capability.strip():
        return Reject("EMPTY_CAPABILITY", "the envelope names no capability; set `capability`")
    try:
        check_capability(capability)
    except Exception as exc:  # InvalidName: its message says what is expected
        return Reject("BAD_CAPABILITY", str(exc))
    range_text = envelope.get("capability_version") or "*"
    try:
        parse_range(range_text)
    except BadVersion as exc:
        return Reject("BAD_VERSION_RANGE", str(exc))
    bad_budget = allowance.problem(envelope)
    if bad_budget is not None:
        return Reject("BAD_BUDGET", bad_budget)
    return RouteRequest.from_envelope(envelope)


def inbox_partition(registration: AgentRegistration, routing_key: str) -> int:
    """A partition the instance owns; the same key always maps to the same one (session order)."""
    owned = sorted(registration.assigned_partitions)
    return owned[zlib.crc32(routing_key.encode()) % len(owned)]


def decide(
    request: RouteRequest,
    registrations: Iterable[AgentRegistration],
    *,
    weights: Mapping[str, float] | Weights,
    now_ms: int,
    loads: Mapping[str, InstanceLoad] | None = None,
    disabled: Collection[str] = frozenset(),
    affinity: Mapping[str, str] | None = None,
    health: Mapping[str, InstanceHealth] | None = None,
    rng: random.Random | None = None,
    payload: bytes | None = None,
    canaries: Mapping[str, Canary] | None = None,
    throttled: Mapping[str, int] | None = None,
    queue_when_full: bool = False,
    costs: Mapping[str, float] | None = None,
) -> RouteOutcome:
    """Decide where one request goes: a `Decider` of one decision (the router decides a batch with one Decider).

    Filter (`health`: OPEN is out), admit (canary arm by agent id in `canaries`, HALF_OPEN / restore shares), shed
    (health weight 0, full queues, `throttled`: instance -> ms until its qps bucket refills), score (`costs`: observed
    cost per successful call by instance_id, micro-units, reach.core.costbook). Pass `payload` only when the
    capability's policy validates at the router. `queue_when_full`: when every candidate is full, pick among them
    rather than fail with OVERLOAD (a fan-out delivery queues in its subscriber's inbox, reach.core.fanout)."""
    decider = Decider(now_ms=now_ms, loads=dict(loads or {}), disabled=disabled, health=health, canaries=canaries,
                      costs=costs, rng=rng)
    return decider.decide(request, registrations, weights=weights, affinity=affinity, payload=payload,
                          throttled=throttled, queue_when_full=queue_when_full)


@dataclass(slots=True)
class _Shape:
    """What the batch's requests of one shape share: the instances that match them (with the loads last seen), the
    OPEN ones, whether admission can leave anyone out, and the factor columns that read no load, by candidate set."""

    registrations: object  # held: the cache key carries its id
    matched: list[Candidate]
    seen: list[InstanceLoad | None]  # the load each candidate was built with (None: its heartbeat's)
    opened: Mapping[str, int | None]
    admits_all: bool  # no canary among their agents, every health record admits everyone
    boards: dict[tuple[object, ...], ScoreBoard]  # by (region, priority, candidate ids)


class Decider:
    """The routing decisions of one batch, taken in order with `decide`: pure, no I/O.

    The constructor takes what every decision of the batch reads (the clock, loads, control, health, canaries, costs);
    `decide` takes the request and what is its own. What does not change within the batch is computed once per
    request shape (capability, version range, tenant, to_agent, tags, exclusions, and the registrations it is routed
    among): the matching instances, OPEN ones, admission's no-op case and the factor columns that read no load
    (reach.core.factors `batch_stable`); a ScoreBoard scores again only the candidates whose load moved. A Forward
    adds one queued request to its instance in `loads`, which the Decider owns from then on, so a decision sees the
    batch's earlier ones. The same registrations object must mean the same registrations for the Decider's life (the
    router's per-capability tuples of one batch)."""

    def __init__(self, *, now_ms: int, loads: dict[str, InstanceLoad] | None = None,
                 disabled: Collection[str] = frozenset(), health: Mapping[str, InstanceHealth] | None = None,
                 canaries: Mapping[str, Canary] | None = None, costs: Mapping[str, float] | None = None,
                 rng: random.Random | None = None) -> None:
        self.now_ms = now_ms
        self.loads: dict[str, InstanceLoad] = {} if loads is None else loads
        self._disabled = disabled
        self._health: Mapping[str, InstanceHealth] = health or {}
        self._canaries: Mapping[str, Canary] = canaries or {}
        self._costs: Mapping[str, float] = costs or {}
        self._rng = rng or random.Random()
        self._shapes: dict[tuple[object, ...], _Shape] = {}
        self._waits = Waits(self._health)  # the batch's queue waits (reach.core.backlog)

    def decide(
        self,
        request: RouteRequest,
        registrations: Iterable[AgentRegistration],
        *,
        weights: Mapping[str, float] | Weights,
        affinity: Mapping[str, str] | None = None,
        payload: bytes | None = None,
        throttled: Mapping[str, int] | None = None,
        queue_when_full: bool = False,
    ) -> RouteOutcome:
        """Where `request` goes among `registrations` (see `decide`)."""
        now_ms = self.now_ms
        if request.deadline is not None and request.deadline <= now_ms:
            return Expired(f"the budget ended {now_ms - request.deadline} ms before the router saw the request")
        health = self._health
        shape = self._shape(request, registrations)
        candidates = self._current(shape)
        if not candidates and shape.opened:
            unavailable = Matched(candidates, shape.opened).unavailable_ms(now_ms)
            if unavailable is not None:
                return Unavailable(unavailable, _unavailable_message(request, sorted(shape.opened)))
        if shape.admits_all:
            admitted, note, arms = candidates, None, None
        else:
            admission = admit(request, candidates, health=health, canaries=self._canaries)
            if not admission.candidates and admission.refused:
                names = sorted(c.instance_id for c in admission.refused) + sorted(shape.opened)
                return Unavailable(OPEN_RETRY_AFTER_MS, _unavailable_message(request, names))
            admitted, note, arms = admission.candidates, admission.note, admission.arms
        selection = shed(admitted, health=health, throttled=throttled)
        if queue_when_full and selection.all_overloaded:
            selection = Selection(candidates=selection.overloaded, overloaded=())
        queued = _queued(request, selection, health, now_ms) if selection.all_overloaded else None
        if queued is not None:  # a burst queues: behind the full instance that starts it soonest
            selection = Selection(candidates=(queued.candidate,), overloaded=())
        context = ScoringContext(health=health, affinity=affinity or {}, arms=arms or {}, costs=self._costs)
        if selection.all_overloaded:
            scores = score_all(request, selection.overloaded, weights, context)
            return Overload(_overload_retry_after(selection), scores, as_factor_weights(weights),
                            overload_message(selection))
        if not selection.candidates:
            future = request.expire_at is not None and request.expire_at > now_ms
            detail = f" {request.serves_range}" if request.serves_range != "*" else ""
            target = f" of {request.to_agent}" if request.to_agent else ""
            return NoRoute(
                future,
                f"no READY instance{target} serves {request.capability}{detail} for tenant {request.tenant!r}",
            )
        chosen = selection.candidates
        resolved = as_factor_weights(weights)
        key = (request.region, request.priority, *(c.registration.instance_id for c in chosen))
        board = shape.boards.get(key)
        if board is None or board.weights is not resolved:
            board = shape.boards[key] = ScoreBoard(request, chosen, resolved, context)
        if arms or sticky_instance(request, context) is not None:  # the board keeps neither
            decision = score(request, chosen, resolved, context, self._rng, stable=board.stable)
        else:
            decision = score(request, chosen, resolved, context, self._rng, board=board)
        if payload is not None:
            problem = validation_error(decision.picked.capability.input_schema, payload, request.content_type)
            if problem is not None:
                return Reject("INVALID_INPUT", problem)
        picked = decision.picked
        reg = picked.registration
        picked_health = health.get(reg.instance_id)
        factor = 1.0
        if len(chosen) == 1 and picked_health is not None and picked_health.timeout_factor > 1:
            factor = picked_health.timeout_factor  # slow, but the sole candidate: it serves with more time
        self.loads[reg.instance_id] = picked.load.plus_routed()  # the batch's next decisions see it
        delivery = self._waits.delivery_timeout_ms(picked, request.delivery_timeout_ms,
                                                   remaining_budget_ms(request.deadline, now_ms))
        return Forward(decision, reg.inbox_topic, inbox_partition(reg, request.routing_key),
                       admission=note, timeout_factor=factor, delivery_timeout_ms=delivery)

    def _shape(self, request: RouteRequest, registrations: Iterable[AgentRegistration]) -> _Shape:
        key = (id(registrations), request.capability, request.serves_range, request.tenant, request.to_agent,
               request.tags, request.excluded_instances)
        shape = self._shapes.get(key)
        if shape is None:
            health, loads = self._health, self.loads
            matched = match(request, registrations, loads=loads, disabled=self._disabled, health=health,
                            now_ms=self.now_ms)
            canaries = self._canaries
            admits_all = not any(c.agent_id in canaries for c in matched.candidates) and all(
                (h := health.get(c.instance_id)) is None or h.admit >= 1.0 for c in matched.candidates)
            shape = self._shapes[key] = _Shape(
                registrations, list(matched.candidates), [loads.get(c.instance_id) for c in matched.candidates],
                matched.open, admits_all, {})
        return shape

    def _current(self, shape: _Shape) -> tuple[Candidate, ...]:
        """The shape's candidates with their loads now (the batch's decisions so far included)."""
        loads, seen, matched = self.loads, shape.seen, shape.matched
        for i, candidate in enumerate(matched):
            load = loads.get(candidate.registration.instance_id)
            if load is not seen[i]:
                seen[i] = load
                registration = candidate.registration
                matched[i] = Candidate(registration, candidate.capability, candidate.version,
                                       load or InstanceLoad.of(registration))
        return tuple(matched)


def _unavailable_message(request: RouteRequest, instances: list[str]) -> str:
    return (f"every instance serving {request.capability} has its circuit breaker open ({', '.join(instances)}); "
            "retry after retry_after_ms, when the first may be probed again")


def _queued(request: RouteRequest, selection: Selection, health: Mapping[str, InstanceHealth],
            now_ms: int) -> Queued | None:
    """Every candidate is full: the one to queue behind, when one meets the request's budget (instances over their
    qps_limit are not queued behind: the bucket is the pace their operator set)."""
    full = [c for c in selection.overloaded if c.instance_id not in selection.throttled]
    return queue_behind(full, budget_ms=remaining_budget_ms(request.deadline, now_ms), health=health,
                        delivery_timeout_ms=request.delivery_timeout_ms) if full else None


def _overload_retry_after(selection: Selection) -> int:
    """The soonest drain of a full queue or refill of a qps bucket."""
    full = [c.load for c in selection.overloaded if c.instance_id not in selection.throttled]
    waits = [retry_after_ms(full)] if full else []
    waits += [max(ms, 1) for ms in selection.throttled.values()]
    return min(waits)


def overload_message(selection: Selection) -> str:
    """What a user sees in an OVERLOAD receipt: each candidate's occupancy, queue and drain rate, or its qps limit."""
    shown = []
    for c in selection.overloaded:
        if c.instance_id in selection.throttled:
            shown.append(f"{c.instance_id} at its qps_limit {c.registration.qps_limit:g}/s")
            continue
        load = c.load
        rate = "not measured yet" if load.drain_rate is None else f"{load.drain_rate:g}/s"
        shown.append(f"{c.instance_id} running {load.occupancy}/{load.capacity}, queue {load.queue}/"
                     f"{load.max_queue}, draining {rate}")
    return ("every candidate is above 80% of its max_concurrency with its queue full, or at its qps_limit ("
            + "; ".join(shown) + "); retry after retry_after_ms")


@lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    from reach.core import patterns

    schema = json.loads(schema_text or "{}")
    return patterns.validator(schema)  # its regexes on RE2: a caller's string cannot freeze the loop


def validation_error(schema_text: str, payload: bytes, content_type: str) -> str | None:
    """Why a JSON payload violates the capability's input schema, or None when it conforms.

    An agent's broken schema (not JSON, not an object, bad keywords, a dangling $ref) is the agent's
    problem, never the caller's: it validates nothing. A payload nested too deeply to read is the caller's."""
    if "json" not in content_type:
        return None
    try:
        document = json.loads(payload)
    except RecursionError:
        return f"payload nests deeper than the JSON reader allows; content_type says {content_type}"
    except ValueError as exc:
        return f"payload is not JSON ({exc}); content_type says {content_type}"
    try:
        error = next(iter(_validator(schema_text).iter_errors(document)), None)
    except RecursionError:
        return "payload nests too deeply to validate against the input schema"
    except Exception:  # noqa: BLE001 - ValueError, TypeError, AttributeError, referencing errors of a bad schema
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"payload violates the input schema at {where}: {error.message}"
