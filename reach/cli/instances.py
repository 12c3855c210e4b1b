"""`reach agents [drain|disable|enable <instance-id>]`: the listing (reach.cli.agents) and operator overrides.

DRAIN: the instance finishes its in-flight work, deregisters and exits. DISABLE: it stays registered but the
router sends it nothing and it reads nothing new from its inbox. ENABLE lifts either. Each is an INSTANCE
record on the compacted control topic; routers and the instance itself follow that topic, so no restart.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import typer

from reach import control
from reach.cli import agents
from reach.cli.common import console, operator_id
from reach.names import Names
from reach.records import InstanceAction
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="List agent instances; drain, disable or enable one.", invoke_without_command=True)


def _listing(ctx: typer.Context, **options: Any) -> None:
    if ctx.invoked_subcommand is None:
        agents.agents(**options)


# The group's callback is today's listing with its own options, so `reach agents [--json]` is unchanged and
# options added to the listing need no edit here.
_listing.__signature__ = inspect.signature(agents.agents).replace(  # type: ignore[attr-defined]
    parameters=[inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
                *inspect.signature(agents.agents).parameters.values()])
_listing.__annotations__ = {"ctx": typer.Context, **agents.agents.__annotations__}
_listing.__doc__ = agents.agents.__doc__
app.callback(invoke_without_command=True)(_listing)

ACTIONS = {
    InstanceAction.DRAIN: "finishes its in-flight work, deregisters and exits",
    InstanceAction.DISABLE: "gets no new work (router and inbox) until enabled",
    InstanceAction.ENABLE: "takes work again",
}


def _override(instance_id: str, action: InstanceAction, as_json: bool) -> None:
    instance_id = instance_id.strip()
    if not instance_id:
        raise typer.BadParameter("give the instance id, as `reach agents` lists it")
    reach = ReachSettings()
    record = control.instance_record(instance_id, action, by=operator_id(reach))
    control.publish(record, names=Names(reach.namespace), kafka=KafkaSettings())
    if as_json:
        console.print_json(json.dumps({"instance_id": instance_id, "action": action.value, "key": record.key}))
    else:
        console.print(f"{action.value} {instance_id}: it {ACTIONS[action]} (key {record.key})", highlight=False)


@app.command()
def drain(instance_id: str = typer.Argument(..., help="the instance id, as `reach agents` lists it"),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Ask an instance to finish its in-flight work, deregister and exit (exit code 0)."""
    _override(instance_id, InstanceAction.DRAIN, as_json)


@app.command()
def disable(instance_id: str = typer.Argument(..., help="the instance id, as `reach agents` lists it"),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Keep an instance registered but give it no new work (the router skips it, its inbox is paused)."""
    _override(instance_id, InstanceAction.DISABLE, as_json)


@app.command()
def enable(instance_id: str = typer.Argument(..., help="the instance id, as `reach agents` lists it"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Lift a DISABLE (or a DRAIN not yet obeyed): the instance takes work again."""
    _override(instance_id, InstanceAction.ENABLE, as_json)
