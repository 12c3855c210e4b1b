"""`reach canary start|status|promote|rollback`: a canary of an agent's new build version, through control."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from reach.cli.common import console, operator_id
from reach.core.canarybook import DEFAULT_STEPS
from reach.core.durations import BadDuration, parse_ms
from reach.names import Names
from reach.ops import canary as ops_canary
from reach.ops.canary import BadCanary, parse_steps
from reach.records import Canary, CanaryState
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Send a share of an agent's traffic to a new build version; promote or roll back.",
                  no_args_is_help=True)



def parse_duration_ms(text: str) -> int:
    """`60s`, `500ms`, `2m`, `1h` or plain seconds -> milliseconds (> 0)."""
    try:
        return parse_ms(text, bare="s", least=1, what="--step", hint="pass e.g. --step 60s, 500ms, 2m")
    except BadDuration as exc:
        raise BadCanary(str(exc)) from None


def _names() -> Names:
    return Names(ReachSettings().namespace)


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
    canary = ops_canary.start(agent_id, version=version, steps=parse_steps(steps), step_ms=parse_duration_ms(step),
                              min_success=min_success, by=operator_id(ReachSettings()), names=_names(),
                              kafka=KafkaSettings())
    _show({agent_id: canary}, as_json)


@app.command()
def status(
    agent_id: str | None = typer.Argument(None, help="one agent; default every canary"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Each canary's state, step, share and the canary arm's success over the step (from the controller)."""
    _show(ops_canary.current(_names(), agent_id, kafka=KafkaSettings()), as_json)


@app.command()
def promote(agent_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """End a running canary as PROMOTED now: the canary version is the agent from here on."""
    done = ops_canary.finish(agent_id, CanaryState.PROMOTED, by=operator_id(ReachSettings()), names=_names(),
                             kafka=KafkaSettings())
    _show({agent_id: done}, as_json)


@app.command()
def rollback(agent_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """End a running canary as ROLLED_BACK now: no request reaches the canary version any more."""
    done = ops_canary.finish(agent_id, CanaryState.ROLLED_BACK, by=operator_id(ReachSettings()), names=_names(),
                             kafka=KafkaSettings())
    _show({agent_id: done}, as_json)


def _show(found: dict[str, Canary], as_json: bool) -> None:
    rows = ops_canary.rows(found)
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if not rows:
        console.print("no canary on the control topic; start one with `reach canary start agent://x --version V`")
        return
    table = Table("agent", "version", "state", "step", "share", "min success", "progress")
    for row in rows:
        table.add_row(str(row["agent_id"]), str(row["version"]), str(row["state"]),
                      f"{row['step']}/{len(row['steps'])}", f"{row['share']:.0%}",
                      f"{row['min_success']:.0%}", str(row["reason"] or ""))
    console.print(table)
