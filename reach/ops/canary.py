"""Canaries of an agent's new build version on the control topic: list them as rows, start one, end one by hand
(promote or roll back); the controller (reach.streams.canary) moves a running one step by step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reach import control
from reach.core.admission import canary_share
from reach.core.canarybook import canaries, ended
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.names import Names, check_agent_id
from reach.records import Canary, CanaryState
from reach.settings import KafkaSettings
from reach.streams.canary.controller import canary_record

ENDINGS = (CanaryState.PROMOTED, CanaryState.ROLLED_BACK)


class BadCanary(ReachError):
    """A canary command whose arguments or current state do not allow it."""


def check_steps(steps: Sequence[int], shown: str) -> list[int]:
    """The steps if they rise strictly within 1..100 and end at 100, else BadCanary quoting them as `shown`."""
    listed = list(steps)
    if not listed or listed[-1] != 100 or any(not 0 < s <= 100 for s in listed) or listed != sorted(set(listed)):
        raise BadCanary(f"--steps {shown!r} must rise strictly within 1..100 and end at 100, e.g. 5,20,50,100")
    return listed


def parse_steps(text: str) -> list[int]:
    """`5,20,50,100` -> [5, 20, 50, 100]: rising percentages ending at 100."""
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadCanary(f"--steps {text!r} is not a list of whole percentages; pass e.g. --steps 5,20,50,100") from None
    return check_steps(steps, text)


def current(names: Names, agent_id: str | None = None, *, kafka: KafkaSettings) -> dict[str, Canary]:
    """The canary of every agent on the control topic (or of `agent_id` only: InvalidName when it is not an agent
    id), by agent id."""
    if agent_id is not None:
        check_agent_id(agent_id)
    found = canaries(control.read_control(names=names, kafka=kafka).records())
    return {a: c for a, c in found.items() if agent_id is None or a == agent_id}


def row(canary: Canary) -> dict[str, Any]:
    """One canary as `reach canary status --json` and the console's Routing page show it (step counts from 1)."""
    return {"agent_id": canary.agent_id, "version": canary.version, "state": str(canary.state),
            "step": canary.step + 1, "steps": canary.steps, "share": canary_share(canary), "step_ms": canary.step_ms,
            "min_success": canary.min_success, "started_at": canary.started_at,
            "step_started_at": canary.step_started_at, "reason": canary.reason}


def rows(found: dict[str, Canary]) -> list[dict[str, Any]]:
    """The canaries' rows by agent id."""
    return [row(c) for c in sorted(found.values(), key=lambda c: c.agent_id)]


def start(agent_id: str, *, version: str, steps: Sequence[int], step_ms: int, min_success: float, by: str,
          names: Names, kafka: KafkaSettings) -> Canary:
    """Publish a RUNNING canary at its first step: that step's share of the agent's traffic goes to instances of
    `version`. BadCanary when an argument is out of range or the agent already runs one: the canary published."""
    check_agent_id(agent_id)
    if not version.strip():
        raise BadCanary("--version is empty; pass the build_version the canary instances register with")
    if not 0.0 < min_success <= 1.0:
        raise BadCanary(f"--min-success {min_success} must be within (0, 1], e.g. 0.95")
    if step_ms <= 0:
        raise BadCanary(f"--step must last more than 0 ms (got {step_ms}); pass e.g. --step 60s, 500ms, 2m")
    checked = check_steps(steps, ",".join(map(str, steps)))
    running = current(names, agent_id, kafka=kafka).get(agent_id)
    if running is not None and running.state is CanaryState.RUNNING:
        raise BadCanary(f"{agent_id} already runs a canary of {running.version}; `reach canary promote` or "
                        "`reach canary rollback` it first")
    now = now_ms()
    canary = Canary(agent_id=agent_id, version=version, steps=checked, step=0, step_ms=step_ms,
                    min_success=min_success, state=CanaryState.RUNNING, started_at=now, step_started_at=now,
                    reason=f"started by {by}")
    control.publish(canary_record(canary, by=by), names=names, kafka=kafka)
    return canary


def finish(agent_id: str, state: CanaryState, *, by: str, names: Names, kafka: KafkaSettings) -> Canary:
    """End the agent's RUNNING canary now as PROMOTED (the canary version is the agent from here on) or
    ROLLED_BACK (no request reaches it any more); BadCanary when it has no running one: the canary published."""
    if state not in ENDINGS:
        raise BadCanary(f"A canary ends as {' or '.join(ENDINGS)}, not {state}.")
    canary = current(names, agent_id, kafka=kafka).get(agent_id)
    if canary is None or canary.state is not CanaryState.RUNNING:
        shown = "no canary" if canary is None else f"a {canary.state} canary of {canary.version}"
        raise BadCanary(f"{agent_id} has {shown}, not a RUNNING one; start one with `reach canary start`")
    done = ended(canary, state, by=by, now_ms=now_ms())
    control.publish(canary_record(done, by=by), names=names, kafka=kafka)
    return done
