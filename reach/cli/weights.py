"""`reach weights show|set`: the routing weight of every scoring factor per capability, changed live through control.

The options of `set` and the rows of `show` come from reach.core.factors.FACTORS: a new factor needs no edit here.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.table import Table

from reach import control
from reach.cli.common import console, operator_id
from reach.core.factors import FACTORS, NAMES, PRESETS, FactorWeights
from reach.names import Names, check_capability
from reach.ops import weights as ops_weights
from reach.records import ControlKind
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help=f"Show and change the router's scoring weights ({', '.join(NAMES)}).", no_args_is_help=True)


def _names() -> Names:
    return Names(ReachSettings().namespace)


def _row(weights: FactorWeights, **extra: object) -> dict[str, object]:
    """One scope in `show --json`: every factor's weight at the top level, where each came from under `from`."""
    return {**weights, "from": {name: weights.source(name) for name in NAMES}, "unknown": weights.unknown, **extra}


@app.command()
def show(
    capability: str | None = typer.Option(None, "--capability", help="the weights in effect for this capability"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every factor's weight per scope on the control topic (the defaults when none is set), and where it came from
    (the capability, `*` or the default)."""
    view = control.read_control(names=_names(), kafka=KafkaSettings())
    records = {r.scope: r for r in view.records().values() if r.kind is ControlKind.WEIGHTS and r.weights}
    rows: dict[str, dict[str, object]] = {}
    for scope, record in records.items():
        rows[scope] = _row(view.weights(scope), updated_at=record.updated_at, updated_by=record.updated_by)
    if "*" not in rows:
        rows["*"] = _row(view.weights("*"), updated_at=None, updated_by="default")
    if capability:
        check_capability(capability)
        scope = capability if capability in rows else "*"
        rows = {capability: {**_row(view.weights(capability)), "updated_at": rows[scope]["updated_at"],
                             "updated_by": rows[scope]["updated_by"], "from_scope": scope}}
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("scope", "factor", "weight", "from", "updated by")
    for scope, row in sorted(rows.items()):
        sources: Any = row["from"]
        for n, name in enumerate(NAMES):
            table.add_row(scope if n == 0 else "", name, f"{row[name]:.2f}", sources[name],
                          str(row.get("updated_by") or "") if n == 0 else "")
        unknown: Any = row["unknown"]
        for name, value in sorted(unknown.items()):
            table.add_row("", name, f"{value:.2f}", "not scored: unknown to this version", "")
    console.print(table)


def _set(
    capability: str | None,
    preset_name: str | None,
    as_json: bool,
    **factors: float | None,
) -> None:
    """Publish new weights for a scope: a --preset (every factor), then the factors given; omitted factors keep
    the value in effect. Routers apply them live."""
    names = _names()
    scope = check_capability(capability) if capability else "*"
    kafka = KafkaSettings()
    new = ops_weights.changed(scope, factors, names=names, kafka=kafka, preset_name=preset_name)
    record = ops_weights.publish(scope, new, by=operator_id(ReachSettings()), names=names, kafka=kafka)
    if as_json:
        console.print_json(json.dumps({"scope": scope, **new}))
    else:
        shown = " ".join(f"{name}={value:g}" for name, value in new.items())
        console.print(f"weights for {scope}: {shown} (key {record.key})", highlight=False)


def _with_factor_options(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn`'s signature with one `--<factor>` option per factor of reach.core.factors.FACTORS (typer reads it)."""
    fixed = [
        inspect.Parameter("capability", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                          default=typer.Option(None, "--capability", help="scope; default all capabilities (*)")),
        inspect.Parameter("preset_name", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                          default=typer.Option(None, "--preset", help=_preset_help())),
        inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                          default=typer.Option(False, "--json")),
    ]
    options = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=float | None,
                          default=typer.Option(None, f"--{f.name}", help=f"{f.meaning} (default weight {f.default:g})"))
        for f in FACTORS
    ]

    def command(**kwargs: Any) -> None:
        fn(kwargs.pop("capability"), kwargs.pop("preset_name"), kwargs.pop("as_json"), **kwargs)

    command.__signature__ = inspect.Signature([*fixed, *options])  # type: ignore[attr-defined]
    command.__doc__ = fn.__doc__
    return command


def _preset_help() -> str:
    described = "; ".join(f"{name}: " + " ".join(f"{k}={v:g}" for k, v in weights.items() if v)
                          for name, weights in PRESETS.items())
    return f"start from a named weighting (every other factor 0), then apply the factors given: {described}"


app.command("set")(_with_factor_options(_set))
