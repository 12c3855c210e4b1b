"""`reach policy show|set`: retry, timeout, budget and idempotency policy per capability, through control."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from reach import control, policyfields
from reach.cli.common import console, err_console
from reach.core.views.control import ControlView
from reach.kafka import topics
from reach.names import Names, check_capability
from reach.records import ControlKind, Policy
from reach.settings import KafkaSettings, ReachSettings

app = typer.Typer(help="Show and change the retry / timeout / budget policy per capability (live, via control).",
                  no_args_is_help=True)


def _names() -> Names:
    return Names(ReachSettings().namespace)


def _tiers() -> list[str]:
    return topics.load(ReachSettings().topics_file).retry_tiers()


def report(view: ControlView, scope: str, tiers: list[str]) -> dict[str, Any]:
    """The effective policy of a scope: per field the value, where it comes from, who applies it; and the
    consistency warnings of tiers, backoff and budget."""
    policy = view.policy(scope)
    rows = policyfields.effective(policy, view.policy_sources(scope))
    return {"scope": scope,
            "fields": {spec.name: {"value": value, "shown": policyfields.show(spec, value), "from": source,
                                   "applies": spec.applies} for spec, value, source in rows},
            "warnings": policyfields.check(policy, tiers)}


@app.command()
def show(
    capability: str | None = typer.Option(None, "--capability", help="the policy in effect for this capability"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the effective policy of `*` and of every capability with its own POLICY record (or of one)."""
    view = control.read_control(names=_names(), kafka=KafkaSettings())
    if capability:
        scopes = [check_capability(capability)]
    else:
        scopes = ["*", *sorted(r.scope for r in view.records().values()
                               if r.kind is ControlKind.POLICY and r.scope != "*")]
    tiers = _tiers()
    reports = [report(view, scope, tiers) for scope in scopes]
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
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Publish the scope's policy; omitted fields keep the scope's current value. SDKs, clients and routers
    follow the control topic and apply it without a restart (new sends take the new timeouts and budget)."""
    names = _names()
    scope = check_capability(capability) if capability else "*"
    durations = {"backoff_base_ms": backoff_base, "backoff_max_ms": backoff_max,
                 "delivery_timeout_ms": delivery_timeout, "execution_timeout_ms": execution_timeout,
                 "budget_ms": budget, "idempotency_window_ms": idempotency_window,
                 "slow_threshold_ms": slow_threshold}
    changes: dict[str, Any] = {
        name: policyfields.parse_duration(text, option=policyfields.BY_NAME[name].option)
        for name, text in durations.items() if text is not None}
    if max_attempts is not None:
        changes["max_attempts"] = max_attempts
    if validate_at_router is not None:
        changes["validate_at_router"] = validate_at_router
    if handoff is not None:
        changes["handoff"] = handoff
    if not changes:
        raise typer.BadParameter("give at least one field to set, e.g. --max-attempts 3 or --budget 2m")
    view = control.read_control(names=names, kafka=KafkaSettings())
    found = view.records().get(control.key_of(ControlKind.POLICY, scope))
    own = found.policy.model_dump() if found is not None and found.policy is not None else {}
    new = Policy(**{**own, **changes})
    record = control.policy_record(new, scope=scope, by="reach-cli")
    control.publish(record, names=names, kafka=KafkaSettings())
    view.apply(record.key, record)
    rep = report(view, scope, _tiers())
    if as_json:
        console.print_json(json.dumps(rep))
        return
    console.print(f"policy for {scope} published (key {record.key}): "
                  + " ".join(f"{k}={policyfields.show(policyfields.BY_NAME[k], v)}" for k, v in changes.items()),
                  highlight=False)
    for warning in rep["warnings"]:
        err_console.print(f"[yellow]warning[/] ({scope}): {warning}", highlight=False)
