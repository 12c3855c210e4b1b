"""What the HTTP service needs besides the door's guards: publish, wait for replies, read status and registry.

Like reach.gateway.ports, these are protocols: the Kafka/Redis/HTTP implementations live in their own
modules (publisher, replies, catalog, statusclient, idempotency) and unit tests use in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from reach.callers import AppDirectory
from reach.cancels import CancelRecord
from reach.envelopes import now_ms
from reach.gateway.ports import Authenticator, Quotas
from reach.records import Capability, Envelope, Receipt

if TYPE_CHECKING:
    from reach.a2a.ports import PushBook
    from reach.console.wiring import Console
    from reach.gateway.budgets import Budgets
    from reach.ops.turns import TurnStore


class Publisher(Protocol):
    """Produces an envelope to its capability topic and returns once the broker acknowledged it."""

    async def publish(self, envelope: Envelope) -> None:
        """Raise reach.errors.InfraUnavailable when the broker did not acknowledge in time."""
        ...

    def healthy(self) -> bool: ...


class Waiter(Protocol):
    """One pending reply: registered before the envelope is published, so the receipt cannot be missed."""

    async def result(self, timeout_s: float) -> Receipt | None:
        """The final terminal receipt of the request's fallback chain, or None when none came within timeout_s."""
        ...

    @property
    def endings(self) -> list[Receipt]:
        """Every ending seen: the request's own first, then its fallback children's (reach.invoke.Followed)."""
        ...

    def cancel(self) -> None: ...


class Replies(Protocol):
    """The gateway process's one reply topic (reach.invoke's reply_to machinery)."""

    @property
    def topic(self) -> str: ...

    def expect(self, message_id: str, generation: int = 0) -> Waiter: ...

    def healthy(self) -> bool: ...


class StatusSource(Protocol):
    """The status table's answers (the stream app's /messages and /traces views): (http status, body)."""

    async def message(self, message_id: str) -> tuple[int, dict[str, Any]]: ...

    async def trace(self, trace_id: str) -> tuple[int, dict[str, Any]]: ...

    async def tenant_tasks(self, tenant: str, query: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """A page of the tenant's tasks, newest update first (`/tenants/<tenant>/tasks`: reach.streams.status.tenants;
        query: status, context, after, page_size, page_token)."""
        ...


class Catalog(Protocol):
    """Which capability versions live instances serve (the registry, read in the background)."""

    def versions(self, capability: str, tenant: str, now_ms: int) -> Sequence[Capability]:
        """Every live HANDLE version of the capability that serves `tenant` (one per version), any range."""
        ...

    def live_capabilities(self, tenant: str | None, now_ms: int) -> Sequence[Capability]:
        """Every live HANDLE capability version serving `tenant` (None: instances open to every tenant)."""
        ...

    def dependencies(self, now_ms: int) -> Mapping[str, Sequence[str]]:
        """The capabilities each live HANDLE capability calls (its instances' `depends_on`, merged)."""
        ...

    def healthy(self) -> bool: ...


class ReceiptSink(Protocol):
    """Produces a receipt to `<ns>.receipts` (a provider's delivery report) and returns once acknowledged."""

    async def receipt(self, receipt: Receipt) -> None:
        """Raise reach.errors.InfraUnavailable (or BrokerRefused) when the broker did not take it."""
        ...


class CancelSink(Protocol):
    """Produces a cancel record (reach.cancels) and returns once the broker acknowledged it."""

    async def cancel(self, record: CancelRecord) -> None: ...


IdemState = Literal["pending", "accepted"]


@dataclass(frozen=True, slots=True)
class Remembered:
    """What an idempotency key maps to: the ids it was given and whether the broker acknowledged them."""

    state: IdemState
    message_id: str
    trace_id: str
    fingerprint: str = ""  # what the first request asked for (admission.fingerprint); "" when recorded before it


class IdempotencyStore(Protocol):
    """app + idempotency_key -> the first request's ids, for the idempotency window (shared by replicas)."""

    async def claim(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> Remembered | None:
        """Store `ids` as pending when the key is new (returns None); else return what it maps to."""
        ...

    async def accepted(self, app_id: str, key: str, ids: Remembered, ttl_s: int) -> None:
        """The broker acknowledged: repeats now get the original 202."""
        ...

    async def release(self, app_id: str, key: str) -> None:
        """The publish failed: the key is free again."""
        ...


@dataclass(frozen=True)
class Dependencies:
    """Everything build_gateway needs; the integrator builds it in reach.gateway.wiring."""

    authenticator: Authenticator
    quotas: Quotas
    publisher: Publisher
    replies: Replies
    status: StatusSource
    catalog: Catalog
    idempotency: IdempotencyStore
    clock_ms: Callable[[], int] = field(default=now_ms)
    directory: AppDirectory | None = None  # the apps' live keys: A2A's bearer tokens (reach.a2a.bearer)
    cancels: CancelSink | None = None  # `<ns>.cancels` (POST /v1/messages/{id}:cancel, A2A CancelTask)
    turns: TurnStore | None = None  # answers to INPUT_REQUIRED (POST /v1/messages/{id}:input, A2A with a task id)
    closers: tuple[Callable[[], Any], ...] = ()
    console: Console | None = None  # the operator console at /console (reach.gateway.routes_console)
    budgets: Budgets | None = None  # apps' spend limits (reach.gateway.budgets); None: not enforced
    receipts: ReceiptSink | None = None  # provider delivery reports (reach.gateway.routes_reports); None: off
    push: PushBook | None = None  # A2A push notification configs (reach.a2a.pushbook); None: push is off
    namespace: str | None = None  # the bus's topic prefix: the cards name the A2A-over-Kafka interface with it
