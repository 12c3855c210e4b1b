"""What MCP needs of the gateway that hosts it: the port reach.gateway.routes_mcp implements and passes in.

MCP is hosted by the gateway and never imports it (tests/unit/test_boundaries.py): a tool call goes through
`Host.send`, the door of `POST /v1/invoke` (tenant, permission, quota, contract, idempotency, the broker's ack),
and waits on the gateway's reply topic for the terminal receipt; who calls is `Host.authenticate` over the
`Authorization: Bearer <key_id>.<secret>` header of every HTTP request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from starlette.types import Scope

from reach.callers import AuthFailure, CallerApp
from reach.records import Capability

if TYPE_CHECKING:
    from reach.mcp.tasks import Sealer, TaskSettings

PENDING = "PENDING"  # Ended.status when no terminal receipt came within the wait


class Refused(Exception):
    """The door refused the call: HTTP status, the stable error code, what happened, what to do."""

    def __init__(self, status: int, error: str, message: str, hint: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.hint = hint
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Ended:
    """How a call ended: the terminal receipt's status and result, or PENDING when the wait ran out."""

    message_id: str
    trace_id: str
    status: str
    result: Any = None
    reason: str | None = None  # what happened, unless COMPLETED (the receipt's error kind/code/message)
    hint: str | None = None
    question: str | None = None  # INPUT_REQUIRED: what the agent asks
    answer_schema: str | None = None  # INPUT_REQUIRED: the JSON Schema (text) its answer must satisfy
    generation: int = 0  # the message's turn (INPUT_REQUIRED: the turn that asks)
    updated_at: int | None = None  # epoch ms of the status row's last change (a task's lastUpdatedAt)


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Sessions are memory and a watch each: bounded per app and per replica, and closed when idle."""

    per_app: int = 16
    total: int = 1000
    idle_s: float = 300.0


class Pending(Protocol):
    """A message the broker acknowledged, waiting for its terminal receipt."""

    @property
    def message_id(self) -> str: ...

    async def ended(self, timeout_s: float) -> Ended:
        """The terminal outcome, or an Ended with status PENDING after timeout_s."""
        ...

    def forget(self) -> None:
        """Stop waiting (the call was cancelled)."""
        ...


class Host(Protocol):
    """The gateway as MCP sees it."""

    @property
    def call_timeout_s(self) -> float:
        """How long a tool call waits for the terminal receipt."""
        ...

    @property
    def max_body_bytes(self) -> int:
        """The largest HTTP request body MCP reads."""
        ...

    def authenticate(self, authorization: str | None) -> CallerApp | AuthFailure:
        """The app whose key the bearer token is; raises reach.errors.InfraUnavailable while keys may be stale."""
        ...

    def capabilities(self, app: CallerApp) -> Sequence[Capability]:
        """Every live capability version `app` may call (its tenant's instances, its capability list)."""
        ...

    async def send(self, app: CallerApp, *, capability: str, payload: Any,
                   idempotency_key: str | None) -> Pending:
        """Admit and publish one message for `app`; Refused when the door refuses it."""
        ...

    async def cancel(self, app: CallerApp, message_id: str) -> None:
        """Produce the app's cancel record for the message (tenant-scoped)."""
        ...

    async def look(self, app: CallerApp, message_id: str) -> Ended | None:
        """Where the message's chain is now (its status row, a fallback child followed to the chain's current
        message): None when the status table has no row of the app's tenant for it (not folded yet, another
        tenant's, or past its retention). A task's state (reach.mcp.tasks)."""
        ...

    @property
    def tasks(self) -> TaskSettings:
        """When a call becomes a task (the Tasks extension), the poll interval and a task's time to live."""
        ...

    @property
    def sealer(self) -> Sealer:
        """What seals task ids for an app (the gateway's secrets box; the same on every replica)."""
        ...

    async def answer(self, app: CallerApp, message_id: str, answer: Any) -> Pending:
        """Answer the question the message asks (INPUT_REQUIRED, reach.ops.turns: the app's tenant only) and wait for
        its next turn; Refused saying why not (400 a wrong answer, 404 unknown, 409 not waiting, 410 too late)."""
        ...

    async def read(self, app: CallerApp) -> None:
        """One token of the app's read quota (a session opened, a tool list, a notification stream); Refused 429
        when it is used up, 503 when the quota store does not answer."""
        ...

    def open_session(self, app: CallerApp, held: int) -> None:
        """Refused 429 when the app, holding `held` sessions on this replica, may open no more."""
        ...

    @property
    def limits(self) -> SessionLimits:
        """How many sessions (per app, all apps) and how long one may idle."""
        ...

    def origins(self, scope: Scope) -> Sequence[str]:
        """The `Origin` values a browser may call /mcp from (the gateway's own among them)."""
        ...

    def resource_metadata(self, scope: Scope) -> str:
        """The URL of this resource's OAuth protected resource metadata (RFC 9728), for `WWW-Authenticate`."""
        ...
