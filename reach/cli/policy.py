"""`reach policy show|set`: retry, timeout, budget and idempotency policy per capability, through control."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from reach import policyfields
from reach.cli.common import console, err_console, operator_id
from reach.kafka import topics
from reach.names import Names
from reach.ops import policy as ops_policy
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Show and change the retry / timeout / budget policy per capability (live, via control).",
                  no_args_is_help=True)


def _names() -> Names:
    return Names(ReachSettings().namespace)


def _tiers() -> list[str]:
    return topics.load(ReachSettings().topics_file).retry_tiers()


@app.command()
def show(
    capability: str | None = typer.Option(None, "--capability", help="the policy in effect for this capability"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the effective policy of `*` and of every capability with its own POLICY record (or of one)."""
    reports = ops_policy.show(names=_names(), tiers=_tiers(), capability=capability, kafka=KafkaSettings())
    if as_json:
        console.print_json(json.dumps(reports))
        return
    for rep in reports:
        table = Table("field", "value", "from", "applied by", title=f"policy for {rep['scope']}")
        for name, row in rep["fields"].items():
            table.add_row(name, row["shown"], row["from"], row["applies"])
        console.print(table)
        for warning in rep["warnings"]:
            err_console.print(f"[yellow]warning[/] ({rep['scope']}): {warning}", highlight=False)


@app.command("set")
def set_(
    capability: str | None = typer.Option(None, "--capability", help="scope; default all capabilities (*)"),
    max_attempts: int | None = typer.Option(None, "--max-attempts", min=1),
    backoff_base: str | None = typer.Option(None, "--backoff-base", help="e.g. 200ms"),
    backoff_max: str | None = typer.Option(None, "--backoff-max", help="e.g. 30s"),
    delivery_timeout: str | None = typer.Option(None, "--delivery-timeout", help="ROUTED -> STARTED, e.g. 5s"),
    execution_timeout: str | None = typer.Option(None, "--execution-timeout", help="one run, e.g. 30s"),
    budget: str | None = typer.Option(None, "--budget", help="created -> deadline, e.g. 2m"),
    validate_at_router: bool | None = typer.Option(None, "--validate-at-router/--no-validate-at-router"),
    idempotency_window: str | None = typer.Option(None, "--idempotency-window", help="e.g. 24h"),
    slow_threshold: str | None = typer.Option(None, "--slow-threshold", help="e.g. 2s"),
    handoff: bool | None = typer.Option(None, "--handoff/--no-handoff",
                                        help="no instance serves it: hand the request to a human, not UNROUTABLE"),
    fallback: str | None = typer.Option(None, "--fallback",
                                        help="a capability that serves the request when it ends FAILED, "
                                             "DEAD_LETTERED, UNROUTABLE, OVERLOAD or UNAVAILABLE; `none` clears it"),
    dead_after: str | None = typer.Option(None, "--dead-after",
                                          help="a dead letter nobody redrove this long is DEAD and its owner told, "
                                               "e.g. 7d"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Publish the scope's policy; omitted fields keep the scope's current value. SDKs, clients and routers
    follow the control topic and apply it without a restart (new sends take the new timeouts and budget)."""
    scope = ops_policy.scope_of(capability)
    changes = ops_policy.changes({
        "backoff_base_ms": backoff_base, "backoff_max_ms": backoff_max, "delivery_timeout_ms": delivery_timeout,
        "execution_timeout_ms": execution_timeout, "budget_ms": budget, "idempotency_window_ms": idempotency_window,
        "slow_threshold_ms": slow_threshold, "max_attempts": max_attempts, "validate_at_router": validate_at_router,
        "handoff": handoff, "fallback": fallback, "dead_after_ms": dead_after})
    if not changes:
        raise typer.BadParameter("give at least one field to set, e.g. --max-attempts 3 or --budget 2m")
    done = ops_policy.publish(scope, changes, by=operator_id(ReachSettings()), names=_names(), tiers=_tiers(),
                              kafka=KafkaSettings())
    if as_json:
        console.print_json(json.dumps(done.report))
        return
    console.print(f"policy for {scope} published (key {done.record.key}): "
                  + " ".join(f"{k}={policyfields.show(policyfields.BY_NAME[k], v)}" for k, v in changes.items()),
                  highlight=False)
    for warning in done.report["warnings"]:
        err_console.print(f"[yellow]warning[/] ({scope}): {warning}", highlight=False)
