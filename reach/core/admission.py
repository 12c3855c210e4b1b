"""Admission before scoring (pure): the canary arm and the HALF_OPEN / restore share, by a stable hash.

A request's place in [0, 1) is a hash of its routing key (session_key, else message_id) salted by
what it is admitted to, so one session always lands on the same side of a share: a session stays on
its canary arm (salt: the agent id) and on the same side of an instance's gradual restore (salt: the
instance id). Scoring then sees only the admitted candidates, so session affinity is kept within the
arm: the sticky instance of the other arm is simply not a candidate.

- Canary (a `Canary` control record per agent): while RUNNING, instances of the agent whose
  build_version is the canary version are the `canary` arm, the agent's other instances the `stable`
  arm. `RoutingHints.canary` pins a request to the canary arm; otherwise it is the canary arm when its
  place is below the current step's share. An arm with no candidate yields to the other one (noted).
  ROLLED_BACK: the canary version is never a candidate. PROMOTED: the canary version is the agent, so
  its other versions are left out while a promoted instance is a candidate.
- Health `admit` < 1: the instance takes only the requests whose place (salted by its id) is below
  `admit`. A HALF_OPEN instance's left-out requests never reach it (its probes are the admitted
  share); a CLOSED instance being restored is kept when nothing else is left.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reach.core.candidates import Candidate, RouteRequest
from reach.records import BreakerState, Canary, CanaryState, InstanceHealth

STABLE = "stable"
CANARY = "canary"
ARMS = (STABLE, CANARY)
"""Decision.arm values (None when the request's agents run no canary)."""

_SCALE = float(1 << 64)


def place(routing_key: str, salt: str) -> float:
    """Where a routing key falls in [0, 1) for one admission (stable across processes and restarts)."""
    digest = hashlib.blake2b(routing_key.encode(), digest_size=8, key=salt.encode()[:64]).digest()
    return int.from_bytes(digest, "big") / _SCALE


def admitted(routing_key: str, salt: str, share: float) -> bool:
    """True when the key falls inside `share` (0..1) of the traffic salted by `salt`."""
    return share >= 1.0 or (share > 0.0 and place(routing_key, salt) < share)


def canary_share(canary: Canary) -> float:
    """The current step's share of the agent's traffic for the canary arm (0..1)."""
    if canary.state is CanaryState.PROMOTED:
        return 1.0
    if canary.state is not CanaryState.RUNNING or not canary.steps:
        return 0.0
    step = min(max(canary.step, 0), len(canary.steps) - 1)
    return min(max(canary.steps[step], 0), 100) / 100.0


@dataclass(frozen=True, slots=True)
class Admission:
    """Who may be scored, the canary arm of the request (or None), and who was left out and why (or None)."""

    candidates: tuple[Candidate, ...]
    arm: str | None
    note: str | None
    refused: tuple[Candidate, ...] = ()  # HALF_OPEN instances that did not admit the request (never a fallback)
    arms: Mapping[str, str] = field(default_factory=dict)  # instance_id -> arm, for CandidateScore.arm / Decision.arm


def admit(
    request: RouteRequest,
    candidates: Sequence[Candidate],
    *,
    health: Mapping[str, InstanceHealth],
    canaries: Mapping[str, Canary],
) -> Admission:
    """Apply the canary arms, then the health shares, to candidates that passed the filter."""
    kept = tuple(candidates)
    notes: list[str] = []
    arm: str | None = None
    arms: dict[str, str] = {}
    key = request.routing_key
    for agent_id in sorted({c.agent_id for c in kept}):
        canary = canaries.get(agent_id)
        if canary is None:
            continue
        kept, agent_arm, note = _canary_arm(request, key, kept, canary)
        if agent_arm is not None:
            arm = agent_arm if arm is None or agent_arm == CANARY else arm
            arms.update((c.instance_id, agent_arm) for c in kept if c.agent_id == agent_id)
        if note:
            notes.append(note)
    restoring: list[Candidate] = []
    refused: list[Candidate] = []
    admitted_now: list[Candidate] = []
    for c in kept:
        h = health.get(c.instance_id)
        if h is None or h.admit >= 1.0 or admitted(key, c.instance_id, h.admit):
            admitted_now.append(c)
        elif h.breaker is BreakerState.HALF_OPEN:
            refused.append(c)
        else:
            restoring.append(c)
    if refused:
        notes.append(f"{_names(refused)} HALF_OPEN: not a probe")
    if restoring:
        if admitted_now:
            notes.append(f"{_names(restoring)} restoring: outside its share")
        else:
            admitted_now = restoring
            notes.append(f"{_names(restoring)} restoring: outside its share, kept (nothing else left)")
    return Admission(tuple(admitted_now), arm, "; ".join(notes) or None, tuple(refused), arms)


def _canary_arm(
    request: RouteRequest, key: str, kept: tuple[Candidate, ...], canary: Canary
) -> tuple[tuple[Candidate, ...], str | None, str | None]:
    agent = canary.agent_id
    new = [c for c in kept if c.agent_id == agent and c.registration.build_version == canary.version]
    old = [c for c in kept if c.agent_id == agent and c.registration.build_version != canary.version]
    others = tuple(c for c in kept if c.agent_id != agent)
    if canary.state is CanaryState.ROLLED_BACK:
        note = f"{agent} {canary.version} rolled back: {_names(new)} left out" if new else None
        return (*others, *old), None, note
    if canary.state is CanaryState.PROMOTED:
        if new and old:
            return (*others, *new), None, f"{agent} {canary.version} promoted: {_names(old)} left out"
        return kept, None, None
    if canary.state is not CanaryState.RUNNING:
        return kept, None, None  # a state this reader does not know: no split
    share = canary_share(canary)
    wanted = CANARY if request.canary or admitted(key, agent, share) else STABLE
    why = "pinned by the canary hint" if request.canary else f"share {share:.0%}"
    chosen, other = (new, old) if wanted == CANARY else (old, new)
    if not chosen and other:
        arm = STABLE if wanted == CANARY else CANARY
        return (*others, *other), arm, f"{agent} {wanted} arm ({why}) has no candidate: {arm} arm serves"
    note = f"{agent} {wanted} arm ({why}): {_names(other)} left out" if other else None
    return (*others, *chosen), wanted, note


def _names(candidates: Sequence[Candidate]) -> str:
    return ",".join(c.instance_id for c in candidates)
