"""What A2A needs of the gateway that mounts it: the port reach.gateway.routes_a2a implements and passes in.

A2A is hosted by the gateway and never imports it: the request handler (reach.a2a.handler) admits and publishes
through `Host.submit`, reads status rows through `Host.message` / `Host.trace` (raw) and `Host.row` / `Host.find`
(another tenant's row reads as absent, the gateway's rule), and waits with the gateway's timings."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from reach.a2a.push import TaskPush
from reach.callers import CallerApp

Row = tuple[int, dict[str, Any]]  # (HTTP status of the status views, the JSON body: a row or an error)


class Refused(Exception):
    """The door refused the message: HTTP status, the stable error code, what happened, headers (Retry-After)."""

    def __init__(self, status: int, error: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Sent:
    """A message the broker acknowledged."""

    message_id: str
    trace_id: str
    generation: int = 0  # an answer's next turn runs as the next generation of the same message


class Host(Protocol):
    """The gateway as A2A sees it."""

    @property
    def invoke_timeout_s(self) -> float:
        """How long a blocking send waits for the final state."""
        ...

    @property
    def poll_s(self) -> float:
        """Between two reads of a status row."""
        ...

    @property
    def find_s(self) -> float:
        """How long a task sent a moment ago may take to show in the status table."""
        ...

    @property
    def stream_max_s(self) -> float:
        """How long one stream follows a task before it ends (the caller resubscribes)."""
        ...

    async def submit(self, app: CallerApp, *, capability: str, payload: Any, idempotency_key: str | None,
                     context_id: str | None, version: str = "*", max_tokens: int | None = None,
                     max_cost: float | None = None) -> Sent:
        """Admit and publish one message for `app` (the context, when given, is its session key and its trace;
        `version` the capability's range, `max_tokens` / `max_cost` its budget: reach.a2a.hints); Refused when the
        door refuses it (a repeated idempotency key answers with the first message's ids)."""
        ...

    async def answer(self, app: CallerApp, task_id: str, payload: Any) -> Sent:
        """Answer the question the task asks (INPUT_REQUIRED) with `payload`: the task's next turn is published
        (reach.ops.turns); Refused with the HTTP status of the refusal (400 wrong schema, 404 unknown, 409 not
        waiting, 410 past its deadline, 503)."""
        ...

    async def message(self, message_id: str) -> Row:
        """The status row of a message, whoever's it is."""
        ...

    async def trace(self, trace_id: str) -> Row:
        """The message ids of a trace, whoever's they are."""
        ...

    async def tasks(self, app: CallerApp, query: Mapping[str, str]) -> Row:
        """A page of the app's tenant's tasks from the status table's tenant index, newest update first: `message_ids`,
        `next_page_token`, `total_size`, `page_size` (query: status, context, after, page_size, page_token)."""
        ...

    async def row(self, app: CallerApp, message_id: str) -> Row:
        """The message's row as `app` may see it (another tenant's reads as absent)."""
        ...

    async def take_read(self, app: CallerApp, rows: int = 1) -> None:
        """The app's read quota for a read of `rows` status rows (the gateway's price: one token per 25, at least
        one); Refused (429 with Retry-After, 503) when there is not enough (ListTasks)."""
        ...

    async def admit_push(self, app: CallerApp) -> None:
        """The gateway's admission of one push config (a webhook per change of the task): Refused 403 when the app
        may not call channel.webhook, 429 over its spend limits or its quota, 503."""
        ...

    def stream(self, app: CallerApp) -> AbstractContextManager[None]:
        """Hold one of the app's event stream slots while a stream follows a task (shared with the gateway's own
        event streams); Refused 429 when the app holds them all."""
        ...

    def wait(self, app: CallerApp) -> AbstractContextManager[None]:
        """Hold one of the app's wait slots while a call waits by re-reading a task's row (a blocking SendMessage,
        CancelTask); Refused 429 when the app holds them all."""
        ...

    async def find(self, app: CallerApp, message_id: str) -> Row:
        """`row`, waiting up to find_s for a message the status table has not folded yet; Refused (429) when the
        app's read quota is used up (GetTask and SubscribeToTask read through here)."""
        ...


class PushBook(Protocol):
    """Where push notification configs are kept (reach.a2a.pushbook: the `<ns>.push` topic), and the sender's door
    for a task's current row (a config set on a running task catches up with it)."""

    @property
    def allow_private(self) -> bool:
        """Whether push URLs may name non-public addresses (REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE)."""
        ...

    def get(self, task_id: str) -> TaskPush | None: ...

    async def put(self, task: TaskPush) -> None:
        """Keep the task's set (none left: forget the task); acknowledged by the store before it returns."""
        ...

    def offer(self, row: dict[str, Any]) -> None: ...
