"""`reach weights show|set`: the routing weights per capability, changed at run time through control."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from reach import control
from reach.cli.common import console
from reach.errors import ReachError
from reach.names import Names, check_capability
from reach.records import ControlKind, Weights
from reach.settings import ReachSettings

app = typer.Typer(help="Show and change the router's scoring weights (fit, locality, load, affinity).",
                  no_args_is_help=True)


class BadWeights(ReachError):
    """Weights must be finite, non-negative and not all zero."""


def merged(current: Weights, **changes: float | None) -> Weights:
    """`current` with the given weights replaced; BadWeights when the result cannot score (NaN, inf, < 0, all 0)."""
    new = current.model_copy(update={k: v for k, v in changes.items() if v is not None})
    problem = control.weights_problem(new)
    if problem is not None:
        raise BadWeights(f"{problem[0].upper()}{problem[1:]}. Pass numbers like --load 0.3.")
    return new


def _names() -> Names:
    return Names(ReachSettings().namespace)


@app.command()
def show(
    capability: str | None = typer.Option(None, "--capability", help="the weights in effect for this capability"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the weights records on the control topic (and the defaults when none is set)."""
    view = control.read_control(names=_names())
    rows: dict[str, dict[str, object]] = {}
    for record in view.records().values():
        if record.kind is ControlKind.WEIGHTS and record.weights is not None:
            rows[record.scope] = {**record.weights.model_dump(), "updated_at": record.updated_at,
                                  "updated_by": record.updated_by}
    if "*" not in rows:
        rows["*"] = {**control.DEFAULT_WEIGHTS.model_dump(), "updated_at": None, "updated_by": "default"}
    if capability:
        check_capability(capability)
        scope = capability if capability in rows else "*"
        rows = {capability: {**rows[scope], "from_scope": scope}}
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("scope", "fit", "locality", "load", "affinity", "updated by")
    for scope, row in sorted(rows.items()):
        table.add_row(scope, *(f"{row[k]:.2f}" for k in ("fit", "locality", "load", "affinity")),
                      str(row.get("updated_by") or ""))
    console.print(table)


@app.command("set")
def set_(
    capability: str | None = typer.Option(None, "--capability", help="scope; default all capabilities (*)"),
    fit: float | None = typer.Option(None, "--fit"),
    locality: float | None = typer.Option(None, "--locality"),
    load: float | None = typer.Option(None, "--load"),
    affinity: float | None = typer.Option(None, "--affinity"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Publish new weights for a scope; omitted weights keep the value in effect. Routers apply them live."""
    names = _names()
    scope = check_capability(capability) if capability else "*"
    current = control.read_control(names=names).weights(scope)
    new = merged(current, fit=fit, locality=locality, load=load, affinity=affinity)
    record = control.weights_record(new, scope=scope, by="reach-cli")
    control.publish(record, names=names)
    if as_json:
        console.print_json(json.dumps({"scope": scope, **new.model_dump()}))
    else:
        console.print(f"weights for {scope}: fit={new.fit} locality={new.locality} load={new.load} "
                      f"affinity={new.affinity} (key {record.key})", highlight=False)
