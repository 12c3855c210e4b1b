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
from reach.core.candidates import OPEN_RETRY_AFTER_MS, RouteRequest, Selection, match, shed
from reach.core.factors import FactorWeights, ScoringContext, as_factor_weights
from reach.core.loads import InstanceLoad, retry_after_ms
from reach.core.scoring import ScoredDecision, ScoreParts, score, score_all
from reach.core.versions import BadVersion, parse_range
from reach.names import check_capability
from reach.records import AgentRegistration, Canary, InstanceHealth, Weights


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the envelope to `partition` of `topic`, owned by the picked instance.

    The original bytes, except when `timeout_factor` > 1 (a slow instance serving as the sole candidate):
    then the envelope goes re-encoded with its execution timeout multiplied by it. `arm` and `admission`
    are Decision.arm and Decision.admission of the ROUTED receipt."""

    decision: ScoredDecision
    topic: str
    partition: int
    admission: str | None = None  # Decision.admission: who admission left out before scoring and why, if any
    timeout_factor: float = 1.0

    @property
    def arm(self) -> str | None:
        """Decision.arm: the picked instance's canary arm (None when its agent runs no canary)."""
        return self.decision.arm

    @property
    def instance(self) -> AgentRegistration:
        return self.decision.picked.registration


@dataclass(frozen=True, slots=True)
class Overload:
    """Every matching instance is busy and its queue full: fail fast with a hint from the drain rates."""

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
    """Decide where a request goes: filter (`health`: OPEN is out), admit (canary arm by agent id in
    `canaries`, HALF_OPEN / restore shares), shed (health weight 0, full queues, `throttled`: instance ->
    ms until its qps bucket refills), score (`costs`: observed cost per successful call by instance_id, micro-units,
    reach.core.costbook). Pass `payload` only when the capability's policy validates at the router.
    `queue_when_full`: when every candidate is full, pick among them rather than fail with OVERLOAD
    (a fan-out delivery queues in its subscriber's inbox, reach.core.fanout)."""
    if request.deadline is not None and request.deadline <= now_ms:
        return Expired(f"the budget ended {now_ms - request.deadline} ms before the router saw the request")
    health = health or {}
    matched = match(request, registrations, loads=loads, disabled=disabled, health=health, now_ms=now_ms)
    unavailable = matched.unavailable_ms(now_ms)
    if unavailable is not None:
        return Unavailable(unavailable, _unavailable_message(request, sorted(matched.open)))
    admission = admit(request, matched.candidates, health=health, canaries=canaries or {})
    if not admission.candidates and admission.refused:
        names = sorted(c.instance_id for c in admission.refused) + sorted(matched.open)
        return Unavailable(OPEN_RETRY_AFTER_MS, _unavailable_message(request, names))
    selection = shed(admission.candidates, health=health, throttled=throttled)
    if queue_when_full and selection.all_overloaded:
        selection = Selection(candidates=selection.overloaded, overloaded=())
    context = ScoringContext(health=health, affinity=affinity or {}, arms=admission.arms, costs=costs or {})
    if selection.all_overloaded:
        scores = score_all(request, selection.overloaded, weights, context)
        return Overload(_overload_retry_after(selection), scores, as_factor_weights(weights),
                        overload_message(selection))
    if not selection.candidates:
        future = request.expire_at is not None and request.expire_at > now_ms
        detail = f" {request.version_range}" if request.version_range != "*" else ""
        target = f" of {request.to_agent}" if request.to_agent else ""
        return NoRoute(
            future,
            f"no READY instance{target} serves {request.capability}{detail} for tenant {request.tenant!r}",
        )
    decision = score(request, selection.candidates, weights, context, rng or random.Random())
    if payload is not None:
        problem = validation_error(decision.picked.capability.input_schema, payload, request.content_type)
        if problem is not None:
            return Reject("INVALID_INPUT", problem)
    reg = decision.picked.registration
    picked_health = health.get(reg.instance_id)
    factor = 1.0
    if len(selection.candidates) == 1 and picked_health is not None and picked_health.timeout_factor > 1:
        factor = picked_health.timeout_factor  # slow, but the sole candidate: it serves with more time
    return Forward(decision, reg.inbox_topic, inbox_partition(reg, request.routing_key),
                   admission=admission.note, timeout_factor=factor)


def _unavailable_message(request: RouteRequest, instances: list[str]) -> str:
    return (f"every instance serving {request.capability} has its circuit breaker open ({', '.join(instances)}); "
            "retry after retry_after_ms, when the first may be probed again")


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
