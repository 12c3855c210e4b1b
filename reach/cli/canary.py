"""`reach canary start|status|promote|rollback`: a canary of an agent's new build version, through control."""

from __future__ import annotations

import json
import re

import typer
from rich.table import Table

from reach import control
from reach.cli.common import console
from reach.core.admission import canary_share
from reach.core.canarybook import DEFAULT_STEPS, canaries, ended
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.names import Names, check_agent_id
from reach.records import Canary, CanaryState
from reach.settings import KafkaSettings, ReachSettings
from reach.streams.canary.controller import canary_record

app = typer.Typer(help="Send a share of an agent's traffic to a new build version; promote or roll back.",
                  no_args_is_help=True)

_DURATION = re.compile(r"^(\d+)(ms|s|m|h)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


class BadCanary(ReachError):
    """A canary command whose arguments or current state do not allow it."""


def parse_steps(text: str) -> list[int]:
    """`5,20,50,100` -> [5, 20, 50, 100]: rising percentages ending at 100."""
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadCanary(f"--steps {text!r} is not a list of whole percentages; pass e.g. --steps 5,20,50,100") from None
    if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
        raise BadCanary(f"--steps {text!r} must rise strictly within 1..100 and end at 100, e.g. 5,20,50,100")
    return steps


def parse_duration_ms(text: str) -> int:
    """`60s`, `500ms`, `2m`, `1h` or plain seconds -> milliseconds (> 0)."""
    found = _DURATION.match(text.strip())
    if not found or int(found[1]) <= 0:
        raise BadCanary(f"--step {text!r} is not a duration; pass e.g. --step 60s, 500ms, 2m")
    return int(found[1]) * _UNIT_MS[found[2]]


def _names() -> Names:
    return Names(ReachSettings().namespace)


def _current(names: Names, agent_id: str | None = None) -> dict[str, Canary]:
    found = canaries(control.read_control(names=names, kafka=KafkaSettings()).records())
    return {a: c for a, c in found.items() if agent_id is None or a == agent_id}


@app.command()
def start(
    agent_id: str = typer.Argument(..., help="the agent, e.g. agent://search/web"),
    version: str = typer.Option(..., "--version", help="the build_version of the canary instances"),
    steps: str = typer.Option(",".join(map(str, DEFAULT_STEPS)), "--steps", help="percentages of traffic per step"),
    min_success: float = typer.Option(0.95, "--min-success", help="the canary arm's success rate a step needs"),
    step: str = typer.Option("60s", "--step", help="how long each step lasts at least"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start a canary: the first step's share of the agent's traffic goes to instances of `--version`."""
    check_agent_id(agent_id)
    if not version.strip():
        raise BadCanary("--version is empty; pass the build_version the canary instances register with")
    if not 0.0 < min_success <= 1.0:
        raise BadCanary(f"--min-success {min_success} must be within (0, 1], e.g. 0.95")
    names = _names()
    running = _current(names, agent_id).get(agent_id)
    if running is not None and running.state is CanaryState.RUNNING:
        raise BadCanary(f"{agent_id} already runs a canary of {running.version}; `reach canary promote` or "
                        "`reach canary rollback` it first")
    now = now_ms()
    canary = Canary(agent_id=agent_id, version=version, steps=parse_steps(steps), step=0,
                    step_ms=parse_duration_ms(step), min_success=min_success, state=CanaryState.RUNNING,
                    started_at=now, step_started_at=now, reason="started by reach-cli")
    control.publish(canary_record(canary, by="reach-cli"), names=names, kafka=KafkaSettings())
    _show({agent_id: canary}, as_json)


@app.command()
def status(
    agent_id: str | None = typer.Argument(None, help="one agent; default every canary"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Each canary's state, step, share and the canary arm's success over the step (from the controller)."""
    if agent_id is not None:
        check_agent_id(agent_id)
    _show(_current(_names(), agent_id), as_json)


@app.command()
def promote(agent_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """End a running canary as PROMOTED now: the canary version is the agent from here on."""
    _finish(agent_id, CanaryState.PROMOTED, as_json)


@app.command()
def rollback(agent_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """End a running canary as ROLLED_BACK now: no request reaches the canary version any more."""
    _finish(agent_id, CanaryState.ROLLED_BACK, as_json)


def _finish(agent_id: str, state: CanaryState, as_json: bool) -> None:
    check_agent_id(agent_id)
    names = _names()
    canary = _current(names, agent_id).get(agent_id)
    if canary is None or canary.state is not CanaryState.RUNNING:
        shown = "no canary" if canary is None else f"a {canary.state} canary of {canary.version}"
        raise BadCanary(f"{agent_id} has {shown}, not a RUNNING one; start one with `reach canary start`")
    done = ended(canary, state, by="reach-cli", now_ms=now_ms())
    control.publish(canary_record(done, by="reach-cli"), names=names, kafka=KafkaSettings())
    _show({agent_id: done}, as_json)


def _show(found: dict[str, Canary], as_json: bool) -> None:
    rows = [{"agent_id": c.agent_id, "version": c.version, "state": str(c.state), "step": c.step + 1,
             "steps": c.steps, "share": canary_share(c), "step_ms": c.step_ms, "min_success": c.min_success,
             "started_at": c.started_at, "step_started_at": c.step_started_at, "reason": c.reason}
            for c in sorted(found.values(), key=lambda c: c.agent_id)]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("no canary on the control topic; start one with `reach canary start agent://x --version V`")
        return
    table = Table("agent", "version", "state", "step", "share", "min success", "progress")
    for row in rows:
        table.add_row(str(row["agent_id"]), str(row["version"]), str(row["state"]),
                      f"{row['step']}/{len(row['steps'])}", f"{row['share']:.0%}",  # type: ignore[arg-type]
                      f"{row['min_success']:.0%}", str(row["reason"] or ""))
    console.print(table)
