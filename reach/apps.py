"""Gateway apps (pure): new apps and keys, rotation and revocation as record changes, and the live-key table
the door looks keys up in (an AppDirectory)."""

from __future__ import annotations

import logging
import math
import re
import secrets as _random
import threading
from dataclasses import dataclass

from ulid import ULID

from reach.callers import CallerApp, KeyEntry
from reach.errors import ReachError
from reach.kafka import codec
from reach.names import check_capability
from reach.records import App, AppKey, SpendLimit
from reach.secretbox import SecretBox, SecretUnreadable, new_secret

log = logging.getLogger("reach.apps")

_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_NAME = 100


class AppError(ReachError):
    """An app operation that cannot apply (unknown app or key, already revoked, bad quota)."""


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: the only moment its secret exists in plaintext outside a gateway's memory."""

    app_id: str
    key_id: str
    secret: str


def new_app_id() -> str:
    return "app_" + str(ULID()).lower()


def new_key_id() -> str:
    return "key_" + _random.token_hex(12)


def check_quota(rate: float, burst: int) -> None:
    """Raise AppError unless (rate, burst) makes a token bucket (reach.core.tokenbucket's rule)."""
    if not (math.isfinite(rate) and rate > 0 and burst >= 1):
        raise AppError(f"Quota rate={rate} burst={burst} is invalid: expected a rate > 0 requests/s and a "
                       "burst >= 1, e.g. --rate 100 --burst 200.")


def _check_fields(name: str, tenant: str, capabilities: list[str]) -> None:
    if not name.strip() or len(name) > MAX_NAME or not name.isprintable():
        raise AppError(f"App name {name[:MAX_NAME]!r} is invalid: expected 1-{MAX_NAME} printable characters.")
    if not _TENANT.fullmatch(tenant):
        raise AppError(f"Tenant {tenant!r} is invalid: expected 1-64 letters, digits, '.', '_' or '-'.")
    for capability in capabilities:
        check_capability(capability)


def _key(box: SecretBox, app_id: str, now_ms: int) -> tuple[AppKey, NewKey]:
    key_id, secret = new_key_id(), new_secret()
    sealed = box.seal(app_id, key_id, secret.encode())
    return AppKey(key_id=key_id, sealed_secret=sealed, created_at=now_ms), NewKey(app_id, key_id, secret)


def check_owner(owner: str | None) -> str | None:
    """The owner as given, checked: a channel target such as `email:ops@example.com` (reach/channels/spec.py);
    None or "" for no owner."""
    if not owner:
        return None
    from reach.channels.errors import BadCallback
    from reach.channels.spec import parse

    try:
        parse(owner)
    except BadCallback as exc:
        raise AppError(f"owner {owner[:200]!r} is not a channel target ({exc}); e.g. --owner "
                       "email:ops@example.com or --owner webhook:https://hooks.example.com/x") from None
    return owner


def new_app(box: SecretBox, *, name: str, tenant: str, capabilities: list[str], rate: float, burst: int,
            now_ms: int, by: str, owner: str | None = None) -> tuple[App, NewKey]:
    """A new app record with one key, and that key's secret (to show once)."""
    _check_fields(name, tenant, capabilities)
    check_quota(rate, burst)
    app_id = new_app_id()
    key, made = _key(box, app_id, now_ms)
    app = App(app_id=app_id, name=name, tenant=tenant, capabilities=sorted(set(capabilities)), rate=rate,
              burst=burst, keys=[key], created_at=now_ms, updated_at=now_ms, updated_by=by, owner=check_owner(owner))
    return app, made


def _live(app: App) -> App:
    if app.revoked:
        raise AppError(f"App {app.app_id} is revoked: a revoked app stays revoked; create a new one.")
    return app


def rotated(box: SecretBox, app: App, *, now_ms: int, by: str) -> tuple[App, NewKey]:
    """The app with one more key; the old keys keep working until they are revoked."""
    key, made = _key(box, _live(app).app_id, now_ms)
    return app.model_copy(update={"keys": [*app.keys, key], "updated_at": now_ms, "updated_by": by}), made


def limited(app: App, limits: list[SpendLimit], *, now_ms: int, by: str) -> App:
    """The app with these spend limits (reach.core.spend) in place of its own."""
    return _live(app).model_copy(update={"limits": limits, "updated_at": now_ms, "updated_by": by})


def owned(app: App, owner: str | None, *, now_ms: int, by: str) -> App:
    """The app with this owner (None: none), checked."""
    return _live(app).model_copy(update={"owner": check_owner(owner), "updated_at": now_ms, "updated_by": by})


def revoked(app: App, *, key_id: str | None, now_ms: int, by: str) -> App:
    """The app with one key revoked, or (key_id None) the whole app."""
    _live(app)
    if key_id is None:
        return app.model_copy(update={"revoked_at": now_ms, "updated_at": now_ms, "updated_by": by})
    key = next((k for k in app.keys if k.key_id == key_id), None)
    if key is None:
        raise AppError(f"App {app.app_id} has no key {key_id}: expected one of "
                       f"{', '.join(k.key_id for k in app.keys)} (see `reach apps ls`).")
    if not key.live:
        raise AppError(f"Key {key_id} of app {app.app_id} is already revoked.")
    keys = [k.model_copy(update={"revoked_at": now_ms}) if k.key_id == key_id else k for k in app.keys]
    return app.model_copy(update={"keys": keys, "updated_at": now_ms, "updated_by": by})


def requota(app: App, *, rate: float, burst: int, now_ms: int, by: str) -> App:
    """The app with a new quota (AppError when it makes no token bucket, or the app is revoked); gateways apply
    it when their directory reads the record."""
    _live(app)
    check_quota(rate, burst)
    return app.model_copy(update={"rate": rate, "burst": burst, "updated_at": now_ms, "updated_by": by})


def caller(app: App) -> CallerApp:
    """The door's view of an app."""
    return CallerApp(app_id=app.app_id, name=app.name, tenant=app.tenant, capabilities=tuple(app.capabilities),
                     rate=app.rate, burst=app.burst, limits=tuple(app.limits))


def decode_app(key: bytes | None, value: bytes | None) -> tuple[str, App | None]:
    """An apps-topic record as (app_id, app or None for a tombstone); raises on a record nobody should use."""
    app_id = (key or b"").decode()
    if not app_id:
        raise ValueError("no key")
    app = codec.decode(value, App) if value is not None else None
    if app is not None and app.app_id != app_id:
        raise ValueError(f"record key {app_id!r} differs from its app_id {app.app_id!r}")
    if app is not None:
        check_quota(app.rate, app.burst)  # a hand-written record must not divide a bucket by zero
    return app_id, app


def check_opens(box: SecretBox, app: App) -> None:
    """Raise SecretUnreadable unless `box` opens every live key of the app (the gateways' key is this one)."""
    for k in app.live_keys():
        box.open(app.app_id, k.key_id, k.sealed_secret)


class AppTable:
    """Live keys by key id, folded from apps-topic records (an AppDirectory); a bad record is skipped and
    counted in `refused`, never fatal, and the app's previous state stays."""

    operators = False  # True in reach.console.operators.OperatorTable: it folds only operator records

    def __init__(self, box: SecretBox) -> None:
        self._box = box
        self._lock = threading.Lock()
        self._apps: dict[str, App] = {}
        self._keys: dict[str, KeyEntry] = {}
        self._owner: dict[str, str] = {}  # key id -> app id, for keys only
        self.refused = 0

    def lookup(self, key_id: str) -> KeyEntry | None:
        return self._keys.get(key_id)

    @property
    def alive(self) -> bool:
        return True  # in memory: whoever feeds it keeps it current

    def apps(self) -> dict[str, App]:
        with self._lock:
            return dict(self._apps)

    def apply_raw(self, key: bytes | None, value: bytes | None, *, where: str) -> bool:
        """Fold one record as read from the topic (None value: a tombstone). True when it applied."""
        try:
            app_id, app = decode_app(key, value)
        except codec.RegistryUnavailable:
            raise  # infrastructure, not a bad record: the caller reads again
        except Exception as exc:  # noqa: BLE001 - DecodeError, bad UTF-8, a record the model refuses
            self.refused += 1
            log.warning("skipping a bad apps record at %s: %s", where, exc)
            return False
        return self.apply(app_id, app, where=where)

    def apply(self, app_id: str, app: App | None, *, where: str = "") -> bool:
        """Replace an app's keys by the record's live keys. SecretUnreadable skips the record but still drops
        the app's keys the record no longer lists as live (a revocation must not wait for a readable secret)."""
        entries: dict[str, KeyEntry] = {}
        if app is not None and (app.role is not None) != self.operators:
            app = None  # the other kind's record (an operator's, for the door): no key of it opens here
        if app is not None:
            view = caller(app)
            try:
                for k in app.live_keys():
                    entries[k.key_id] = KeyEntry(k.key_id, view, self._box.open(app_id, k.key_id, k.sealed_secret))
            except SecretUnreadable as exc:
                self.refused += 1
                log.warning("skipping apps record of %s at %s: %s", app_id, where, exc)
                with self._lock:
                    self._drop_keys(app_id, keep={k.key_id for k in app.live_keys()})
                return False
        with self._lock:
            taken = [k for k in entries if self._owner.get(k, app_id) != app_id]
            if taken:  # key ids are unique; a record claiming another app's key is refused, not merged
                self.refused += 1
                log.warning("skipping apps record of %s at %s: key %s belongs to app %s", app_id, where,
                            taken[0], self._owner[taken[0]])
                return False
            self._drop_keys(app_id, keep=set(entries))
            for key_id, entry in entries.items():
                self._owner[key_id] = app_id
                self._keys[key_id] = entry
            if app is None:
                self._apps.pop(app_id, None)
            else:
                self._apps[app_id] = app
        return True

    def _drop_keys(self, app_id: str, *, keep: set[str]) -> None:
        """Forget the app's keys outside `keep` (the caller holds the lock)."""
        for key_id in [k for k, owner in self._owner.items() if owner == app_id and k not in keep]:
            del self._owner[key_id]
            self._keys.pop(key_id, None)
