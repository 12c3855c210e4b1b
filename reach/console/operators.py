"""Console operators as the console's routes see them: who holds a token, checked against the table of live
operator keys folded from the apps topic. Operators themselves (records, roles, tokens, create / list / revoke) are
reach.ops.operators; the signed door never accepts an operator's key, and this table never an app's."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from reach.apps import AppTable
from reach.ops.operators import ROLES, Role, split_token


@dataclass(frozen=True, slots=True)
class Operator:
    """An authenticated operator, as the console's routes see it."""

    operator_id: str
    name: str
    role: Role
    redrive_rate: float

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN


class OperatorTable(AppTable):
    """Live operator keys by key id, folded from the apps topic (the console's directory)."""

    operators = True

    def verify(self, token: str | None) -> Operator | None:
        """The operator a token belongs to, or None (malformed, unknown, revoked or a wrong secret)."""
        parts = split_token(token or "")
        if parts is None:
            return None
        entry = self.lookup(parts[0])
        if entry is None or not hmac.compare_digest(entry.secret, parts[1].encode()):
            return None
        record = self.apps().get(entry.app.app_id)
        if record is None or record.role not in ROLES:
            return None  # a role this version does not know grants nothing
        return Operator(operator_id=record.app_id, name=record.name, role=Role(record.role),
                        redrive_rate=record.rate)
