"""Console operators: App records with a role on the apps topic, their tokens, and their use cases (create, list,
revoke) over an AppLog (reach.appstore: the apps topic, or MemoryAppLog in tests).

An operator is an App v2 record whose `role` is viewer or admin (decision 0018). The signed door never
accepts its key (reach.apps.AppTable folds only role-less records); the console's OperatorTable
(reach.console.operators) folds only operator records. A token is `<key_id>.<secret>`: the key id names the
record, the secret is sealed under the gateway secrets key exactly like an app's HMAC secret. `rate` is the
operator's ceiling on a redrive's messages per second; `burst` is 1 (unused by the console).
"""

from __future__ import annotations

import secrets as _random
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ulid import ULID

from reach import envelopes
from reach.apps import MAX_NAME, AppError, check_quota
from reach.appstore import AppLog
from reach.records import App, AppKey
from reach.secretbox import SecretBox, new_secret

OPERATOR_TENANT = "*"  # operators see every tenant; never stamped on an envelope (operators send none)
DEFAULT_REDRIVE_RATE = 20.0


class Role(StrEnum):
    """What an operator may do: viewer reads every page, admin also redrives, drains and changes routing."""

    VIEWER = "viewer"
    ADMIN = "admin"


ROLES = tuple(r.value for r in Role)


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just made: shown once, never stored in plaintext."""

    operator_id: str
    key_id: str
    token: str


def role_of(text: str) -> Role:
    try:
        return Role(text)
    except ValueError:
        raise AppError(f"Role {text!r} is not one of {', '.join(ROLES)}: viewer reads, admin also acts.") from None


def new_operator(box: SecretBox, *, name: str, role: str, redrive_rate: float, now_ms: int,
                 by: str) -> tuple[App, NewToken]:
    """A new operator record with one key, and its token."""
    if not name.strip() or len(name) > MAX_NAME or not name.isprintable():
        raise AppError(f"Operator name {name[:MAX_NAME]!r} is invalid: expected 1-{MAX_NAME} printable characters.")
    checked = role_of(role)
    check_quota(redrive_rate, 1)
    operator_id = "op_" + str(ULID()).lower()
    key_id, secret = "opk_" + _random.token_hex(12), new_secret()
    key = AppKey(key_id=key_id, sealed_secret=box.seal(operator_id, key_id, secret.encode()), created_at=now_ms)
    record = App(app_id=operator_id, name=name, tenant=OPERATOR_TENANT, rate=redrive_rate, burst=1, keys=[key],
                 created_at=now_ms, updated_at=now_ms, updated_by=by, role=checked.value)
    return record, NewToken(operator_id, key_id, f"{key_id}.{secret}")


def split_token(token: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed token, else None."""
    key_id, dot, secret = token.strip().partition(".")
    if not dot or not key_id.startswith("opk_") or not secret or len(token) > 256:
        return None
    return key_id, secret


class OperatorStore:
    """Create, list and revoke operators over an AppLog (the apps topic); the box is needed only to create."""

    def __init__(self, *, log: AppLog, box: SecretBox | None, by: str) -> None:
        self._log = log
        self._box = box
        self._by = by

    def all(self) -> list[App]:
        return sorted((a for a in self._log.read().values() if a.role is not None),
                      key=lambda a: (a.created_at, a.app_id))

    def create(self, *, name: str, role: str, redrive_rate: float, now_ms: int) -> NewToken:
        if self._box is None:
            raise AppError("Making an operator token needs the secrets key: this store was built without one.")
        record, made = new_operator(self._box, name=name, role=role, redrive_rate=redrive_rate, now_ms=now_ms,
                                    by=self._by)
        self._log.append(record)
        return made

    def revoke(self, operator_id: str, *, now_ms: int) -> App:
        record = self._log.read().get(operator_id)
        if record is None or record.role is None:
            raise AppError(f"No operator {operator_id!r}: expected an id from `reach operators ls`.")
        if record.revoked:
            raise AppError(f"Operator {operator_id} is already revoked.")
        done = record.model_copy(update={"revoked_at": now_ms, "updated_at": now_ms, "updated_by": self._by})
        self._log.append(done)
        return done


def create(store: OperatorStore, *, name: str, role: str, redrive_rate: float = DEFAULT_REDRIVE_RATE) -> NewToken:
    """Create an operator now; AppError for a bad name, role or rate: its token (shown once)."""
    return store.create(name=name, role=role, redrive_rate=redrive_rate, now_ms=envelopes.now_ms())


def listing(store: OperatorStore) -> list[App]:
    """Every operator (apps are not operators), oldest first."""
    return store.all()


def revoke(store: OperatorStore, operator_id: str) -> App:
    """Revoke an operator now: its token stops working on every gateway within about a second."""
    return store.revoke(operator_id, now_ms=envelopes.now_ms())


def token(made: NewToken, *, name: str, role: str) -> dict[str, str]:
    """An operator just made as `--json` shows it: the only place its token is ever written."""
    return {"operator_id": made.operator_id, "name": name, "role": role, "token": made.token}


def summary(record: App) -> dict[str, Any]:
    """An operator as `reach operators ls --json` shows it: never a token."""
    return {"operator_id": record.app_id, "name": record.name, "role": record.role, "redrive_rate": record.rate,
            "revoked_at": record.revoked_at, "created_at": record.created_at, "updated_by": record.updated_by,
            "key_ids": [k.key_id for k in record.live_keys()]}
