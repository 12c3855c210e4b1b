"""`reach apps create|ls|update|rotate|quota|revoke`: the gateway's calling applications, their keys, quotas and
spend limits."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from reach.a2a.bearer import a2a_token
from reach.appstore import AppStore, KafkaAppLog
from reach.cli.common import console, err_console, operator_id
from reach.core.spend import format_limit
from reach.gateway.settings import GatewaySettings
from reach.names import Names
from reach.ops import apps as ops_apps
from reach.ops.apps import DEFAULT_RATE
from reach.secretbox import secret_box
from reach.settings import KafkaSettings, ReachSettings

LIMIT_COST = typer.Option(None, "--limit-cost", help="AMOUNT/day or AMOUNT/month in REACH_CURRENCY units, e.g. "
                          "5.00/day (repeat for both periods; `none` removes the cost limits)")
LIMIT_TOKENS = typer.Option(None, "--limit-tokens", help="TOKENS/day or TOKENS/month, e.g. 2M/month or 250k/day "
                            "(input + output tokens; `none` removes the token limits)")

app = typer.Typer(help="Gateway apps: who may call over HTTP, with which keys, how fast, how much they may spend.",
                  no_args_is_help=True)


def _store(*, making_keys: bool = False) -> AppStore:
    """The store over this namespace's apps topic; the secrets key is loaded (made on a fresh machine) only
    for commands that make keys."""
    reach = ReachSettings()
    box = secret_box(GatewaySettings().secrets_key, reach.home, create=True) if making_keys else None
    return AppStore(log=KafkaAppLog(names=Names(reach.namespace), kafka=KafkaSettings()), box=box,
                    by=operator_id(reach))


def _show_secret(shown: dict[str, Any], as_json: bool) -> None:
    shown = {**shown, "a2a_token": a2a_token(shown["key_id"], shown["secret"].encode())}
    if as_json:
        console.print_json(json.dumps(shown))
        return
    console.print(f"app_id     {shown['app_id']}\nkey_id     {shown['key_id']}\nsecret     {shown['secret']}\n"
                  f"a2a_token  {shown['a2a_token']}", highlight=False)
    err_console.print("The secret is shown only now: store it where the caller keeps secrets. Sign each "
                      "request with it (docs/http.md, Apps and signatures). A2A clients send the a2a_token as "
                      "`Authorization: Bearer` instead (docs/a2a.md); it cannot sign.", highlight=False)


@app.command()
def create(
    name: str = typer.Argument(..., help="a label for the calling system"),
    tenant: str = typer.Option("default", "--tenant", help="stamped on every envelope the app sends"),
    capabilities: str | None = typer.Option(None, "--capabilities", help="C,...: allowed capabilities; default all"),
    rate: float = typer.Option(DEFAULT_RATE, "--rate", help="requests per second, across every gateway replica"),
    burst: int | None = typer.Option(None, "--burst", help="bucket size; default the rate rounded up"),
    limit_cost: list[str] | None = LIMIT_COST,
    limit_tokens: list[str] | None = LIMIT_TOKENS,
    owner: str | None = typer.Option(None, "--owner", help="who answers for its requests: a channel target, e.g. "
                                     "email:ops@example.com (told of its DEAD NO_ROUTE letters)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create an app with one key; prints app_id, key_id and the secret (shown only here)."""
    made = ops_apps.create(_store(making_keys=True), name=name, tenant=tenant,
                           capabilities=ops_apps.capabilities(capabilities), rate=rate, burst=burst,
                           limit_cost=limit_cost, limit_tokens=limit_tokens, owner=owner)
    _show_secret(made.as_dict(), as_json)


@app.command()
def update(
    app_id: str = typer.Argument(...),
    limit_cost: list[str] | None = LIMIT_COST,
    limit_tokens: list[str] | None = LIMIT_TOKENS,
    owner: str | None = typer.Option(None, "--owner", help="a channel target, or `none` to remove the owner"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Change an app's spend limits or owner; gateways apply limits within about a second."""
    record = ops_apps.update(_store(), app_id, limit_cost=limit_cost, limit_tokens=limit_tokens, owner=owner)
    if as_json:
        console.print_json(json.dumps(ops_apps.summary(record)))
        return
    shown = ", ".join(f"{x.kind} {format_limit(x)}" for x in record.limits) or "none"
    console.print(f"app {app_id}: spend limits {shown}; owner {record.owner or 'none'}", highlight=False)


@app.command("ls")
def ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """List apps with their keys and quotas (never a secret)."""
    records = ops_apps.listing(_store())
    if as_json:
        console.print_json(json.dumps([ops_apps.summary(r) for r in records]))
        return
    table = Table("app_id", "name", "tenant", "capabilities", "rate/s", "burst", "limits", "owner", "live keys",
                  "state")
    for r in records:
        live = [k.key_id for k in r.live_keys()]
        limits = "\n".join(f"{x.kind} {format_limit(x)}" for x in r.limits) or "-"
        table.add_row(r.app_id, r.name, r.tenant, ",".join(r.capabilities) or "*", f"{r.rate:g}", str(r.burst),
                      limits, r.owner or "-", "\n".join(live) or "-", "revoked" if r.revoked else "active")
    console.print(table)


@app.command()
def rotate(app_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """Add a new key; the old keys keep working until `reach apps revoke APP_ID --key OLD`."""
    _show_secret(ops_apps.secret(ops_apps.rotate(_store(making_keys=True), app_id)), as_json)


@app.command()
def quota(
    app_id: str = typer.Argument(...),
    rate: float | None = typer.Option(None, "--rate", help="requests per second, across every gateway replica"),
    burst: int | None = typer.Option(None, "--burst", help="bucket size"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Change an app's quota; gateways apply it within about a second (a value not given is kept)."""
    record = ops_apps.set_quota(_store(), app_id, rate=rate, burst=burst)
    if as_json:
        console.print_json(json.dumps(ops_apps.summary(record)))
        return
    console.print(f"app {app_id}: {record.rate:g} requests/s, burst {record.burst}", highlight=False)


@app.command()
def revoke(
    app_id: str = typer.Argument(...),
    key: str | None = typer.Option(None, "--key", help="revoke only this key; default the whole app"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Revoke one key, or the whole app; gateways refuse it within about a second."""
    record = ops_apps.revoke(_store(), app_id, key_id=key)
    if as_json:
        console.print_json(json.dumps(ops_apps.summary(record)))
    elif key is None:
        console.print(f"app {app_id} revoked: none of its keys works any more", highlight=False)
    else:
        console.print(f"key {key} of app {app_id} revoked; live keys: "
                      f"{', '.join(k.key_id for k in record.live_keys()) or 'none'}", highlight=False)
