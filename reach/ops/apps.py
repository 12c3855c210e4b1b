"""The gateway's calling applications: create one (with its quota's defaults), list, change its spend limits, rotate
a key, revoke a key or the whole app, over an AppStore (reach.appstore: the apps topic, or MemoryAppLog in tests). A
secret exists in plaintext only in what create and rotate return."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reach.apps import AppError, NewKey
from reach.appstore import AppStore
from reach.core.spend import Kind, format_limit, merged, parse_limits
from reach.records import App, SpendLimit

DEFAULT_RATE = 100.0


@dataclass(frozen=True, slots=True)
class Created:
    """An app just made: its one key (with the secret, shown once) and the quota and scope it was given."""

    key: NewKey
    name: str
    tenant: str
    capabilities: list[str]
    rate: float
    burst: int
    limits: tuple[SpendLimit, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        shown = {**secret(self.key), "name": self.name, "tenant": self.tenant, "capabilities": self.capabilities,
                 "rate": self.rate, "burst": self.burst}
        return {**shown, "limits": [format_limit(x) for x in self.limits]} if self.limits else shown


def capabilities(text: str | None) -> list[str]:
    """`a.b, c.d` -> the capabilities named, once each and sorted (none: every capability)."""
    return sorted({c.strip() for c in (text or "").split(",") if c.strip()})


def default_burst(rate: float) -> int:
    """The bucket size when none is given: the rate rounded up (at least 1; 1 for a rate that is not finite, which
    the store then refuses)."""
    return max(1, math.ceil(rate)) if math.isfinite(rate) else 1


def create(store: AppStore, *, name: str, tenant: str = "default", capabilities: list[str] | None = None,
           rate: float = DEFAULT_RATE, burst: int | None = None, limit_cost: list[str] | None = None,
           limit_tokens: list[str] | None = None, owner: str | None = None) -> Created:
    """Create an app with one key; AppError when a field, the owner or the quota is invalid, BadLimit when a limit
    is."""
    allowed = sorted(set(capabilities or []))
    size = burst if burst is not None else default_burst(rate)
    limits = with_limits([], limit_cost=limit_cost, limit_tokens=limit_tokens)
    made = store.create(name=name, tenant=tenant, capabilities=allowed, rate=rate, burst=size, limits=limits,
                        owner=owner)
    return Created(key=made, name=name, tenant=tenant, capabilities=allowed, rate=rate, burst=size,
                   limits=tuple(limits))


def with_limits(current: list[SpendLimit], *, limit_cost: list[str] | None,
                limit_tokens: list[str] | None) -> list[SpendLimit]:
    """`current` changed by the CLI's `--limit-cost` / `--limit-tokens` texts (each parsed first: BadLimit before
    anything is written); a kind not given keeps its limits, `none` removes them."""
    changes = [(Kind.COST, parse_limits(limit_cost, Kind.COST)) if limit_cost else None,
               (Kind.TOKENS, parse_limits(limit_tokens, Kind.TOKENS)) if limit_tokens else None]
    limits = list(current)
    for change in changes:
        if change is not None:
            limits = merged(limits, change[0], change[1])
    return limits


def update(store: AppStore, app_id: str, *, limit_cost: list[str] | None = None,
           limit_tokens: list[str] | None = None, owner: str | None = None) -> App:
    """Change an app's spend limits and/or its owner (`none` removes it); the app as it now is."""
    if not limit_cost and not limit_tokens and owner is None:
        raise AppError("Nothing to update: give --limit-cost and/or --limit-tokens (AMOUNT/day, AMOUNT/month or "
                       "none), or --owner (a channel target, or none).")
    app = store.get(app_id)
    if owner is not None:
        app = store.set_owner(app_id, None if owner == "none" else owner)
    if limit_cost or limit_tokens:
        app = store.set_limits(app_id, with_limits(app.limits, limit_cost=limit_cost, limit_tokens=limit_tokens))
    return app


def listing(store: AppStore) -> list[App]:
    """Every app (operators are not apps), oldest first."""
    return store.all()


def rotate(store: AppStore, app_id: str) -> NewKey:
    """Add a new key; the old keys keep working until they are revoked."""
    return store.rotate(app_id)


def set_quota(store: AppStore, app_id: str, *, rate: float | None = None, burst: int | None = None) -> App:
    """Change an app's quota (a value not given keeps the app's; a new rate without a burst keeps the burst);
    AppError when the app is unknown or revoked, or the quota makes no token bucket."""
    if rate is None and burst is None:
        raise AppError("give a new rate, a new burst or both, e.g. --rate 50 --burst 100")
    current = store.get(app_id)
    return store.set_quota(app_id, rate=current.rate if rate is None else rate,
                           burst=current.burst if burst is None else burst)


def revoke(store: AppStore, app_id: str, *, key_id: str | None = None) -> App:
    """Revoke one key, or the whole app (key_id None); gateways refuse it within about a second: the app now."""
    return store.revoke(app_id, key_id=key_id)


def secret(made: NewKey) -> dict[str, str]:
    """A key just made as `--json` shows it: the only place its secret is ever written."""
    return {"app_id": made.app_id, "key_id": made.key_id, "secret": made.secret}


def summary(record: App) -> dict[str, Any]:
    """An app as `reach apps ls --json` shows it: everything but the sealed secrets."""
    return {
        "app_id": record.app_id, "name": record.name, "tenant": record.tenant,
        "capabilities": record.capabilities, "rate": record.rate, "burst": record.burst,
        "revoked_at": record.revoked_at, "created_at": record.created_at, "updated_at": record.updated_at,
        "updated_by": record.updated_by, "limits": [format_limit(x) for x in record.limits], "owner": record.owner,
        "keys": [{"key_id": k.key_id, "created_at": k.created_at, "revoked_at": k.revoked_at} for k in record.keys],
    }
