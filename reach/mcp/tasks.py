"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, 2026-07-28; SEP-2663) over the status table: the shapes,
the task id, how a message's state reads as a task, and the client side (a `ClientExtension` of the official SDK).

A `tools/call` of a client that declares the extension in its request's capabilities, and whose message has not
ended within `TaskSettings.after_s`, answers a task handle (`resultType: "task"`) instead of the tool result; the
client then polls `tasks/get` (the message's status row, the fallback chain followed, as a task), answers a question
with `tasks/update` (as `POST /v1/messages/{id}:input`) and cancels with `tasks/cancel` (the message's cancel record).

**The task id** is the message id and the creation time sealed for the calling app (`Sealer`, the gateway's secrets
box: a Fernet token, so unguessable, opened on any replica that shares the key, and under a key rotation too). A task
id another app presents does not open for it: an app reads, answers and cancels only its own tasks, and a tenant
check on the row stands behind that. Nothing is kept per task: the status row is the task's state, so the task lives
as long as the row (`ttl_ms`, the status retention) and any replica answers for it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import Request, RequestParams, Result
from mcp_types._types import MCPModel

from reach.mcp import rounds, tools
from reach.mcp.ports import Ended

EXTENSION = "io.modelcontextprotocol/tasks"
SEALED_AS = "mcp-task"  # the key id the sealer binds a task id to (beside the app id)
TERMINAL = frozenset({"COMPLETED", "FAILED", "REJECTED", "EXPIRED", "UNROUTABLE", "DEAD_LETTERED", "CANCELED"})
MAX_TASK_ID = 512
MIN_POLL_MS = 250  # the client polls a task no more often than this, whatever interval the server names

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """When a call becomes a task, how often a client should poll, how long a task lives."""

    after_s: float = 5.0  # a declaring client's call that has not ended within this is answered with a task
    poll_ms: int = 1000
    ttl_ms: int | None = 7 * 24 * 3600 * 1000  # the status row's retention: a task lives as long as its row


class Sealer(Protocol):
    """reach.secretbox.SecretBox: seals bytes for an (app, key id) and opens only for the same pair."""

    def seal(self, app_id: str, key_id: str, secret: bytes) -> bytes: ...

    def open(self, app_id: str, key_id: str, token: bytes) -> bytes: ...


class TaskSeal:
    """Task ids: the message id and the creation time, sealed for one app."""

    def __init__(self, sealer: Sealer) -> None:
        self._sealer = sealer

    def task_id(self, app_id: str, message_id: str, created_ms: int) -> str:
        return self._sealer.seal(app_id, SEALED_AS, f"{message_id} {created_ms}".encode()).decode()

    def opened(self, app_id: str, task_id: str) -> tuple[str, int] | None:
        """(message id, created ms) when `task_id` was sealed for `app_id`; None for anything else (another app's
        task, a forged or mangled id, one sealed under a key this gateway no longer has)."""
        if len(task_id) > MAX_TASK_ID:
            return None
        try:
            message_id, _, created = self._sealer.open(app_id, SEALED_AS, task_id.encode()).decode().partition(" ")
            return message_id, int(created)
        except Exception:  # noqa: BLE001 - any failure to open is "not this app's task"
            return None


# --- the wire shapes -------------------------------------------------------------------------------------------


class TaskParams(RequestParams):
    """`tasks/get` and `tasks/cancel` params."""

    task_id: str


class UpdateTaskParams(RequestParams):
    task_id: str
    input_responses: types.InputResponses


class Task(MCPModel):
    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class CreateTaskResult(Result, Task):
    """A `tools/call` answered with a task handle."""

    result_type: Literal["task"] = "task"


class GetTaskResult(Result, Task):
    """`tasks/get`: the task with what its status carries (the questions, the result, the JSON-RPC error)."""

    result_type: Literal["complete"] = "complete"
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Acknowledged(Result):
    """`tasks/update` and `tasks/cancel`: an empty acknowledgement."""

    result_type: Literal["complete"] = "complete"


class GetTaskRequest(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"  # Mcp-Name carries the task id (the extension's routing header)


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


# --- a message's state as a task ---------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def question_key(ended: Ended) -> str:
    """The inputRequests key of a question: unique over the task's life (one per message and turn), as the
    extension asks, so an answer to an earlier turn's question is never taken for a later one."""
    return f"answer:{ended.message_id}:{ended.generation}"


def created(task_id: str, status: TaskStatus, created_ms: int, settings: TaskSettings,
            message: str | None = None) -> CreateTaskResult:
    at = _iso(created_ms)
    return CreateTaskResult(task_id=task_id, status=status, status_message=message, created_at=at,
                            last_updated_at=at, ttl_ms=settings.ttl_ms, poll_interval_ms=settings.poll_ms)


def detailed(task_id: str, ended: Ended | None, created_ms: int, settings: TaskSettings) -> GetTaskResult:
    """The task as `tasks/get` answers it: the chain's current message (None: not on the status table yet, a fresh
    task). Any terminal status is `completed` with the tool result (a failure is a tool result with `isError`, as
    the extension asks: `failed` is for JSON-RPC errors only), CANCELED is `cancelled`, a question is
    `input_required` with its elicitation, anything else `working` (the status row's status as the message)."""
    updated = ended.updated_at if ended is not None and ended.updated_at else created_ms

    def task(status: TaskStatus, message: str | None, **shown: Any) -> GetTaskResult:
        return GetTaskResult(task_id=task_id, status=status, status_message=message, created_at=_iso(created_ms),
                             last_updated_at=_iso(updated), ttl_ms=settings.ttl_ms,
                             poll_interval_ms=settings.poll_ms, **shown)

    if ended is None:
        return task("working", "accepted; not on the status table yet")
    if ended.status == "CANCELED":
        return task("cancelled", ended.reason)
    if ended.status in TERMINAL:
        result = tools.result_of(ended).model_dump(by_alias=True, mode="json", exclude_none=True)
        return task("completed", ended.status, result=result)
    if ended.status == "INPUT_REQUIRED" and ended.question is not None:
        [asked] = (rounds.input_required(ended).input_requests or {}).values()
        shown = asked.model_dump(by_alias=True, mode="json", exclude_none=True)
        return task("input_required", ended.question, input_requests={question_key(ended): shown})
    return task("working", ended.status)


def answer_of(ended: Ended, responses: types.InputResponses) -> Any | None:
    """The answer a `tasks/update` carries for the question the task asks now; None when it answers no question
    that is outstanding (the extension: such responses are ignored). rounds.BadRound when it is declined or not
    the shape asked."""
    if ended.status != "INPUT_REQUIRED" or ended.question is None:
        return None
    found = responses.get(question_key(ended))
    if found is None:
        return None
    wrapped = not rounds.is_object(rounds.schema_of(ended.answer_schema))
    return rounds.answer_of({rounds.KEY: found}, wrapped=wrapped)


# --- the client side: the official SDK's Client drives a task to its result ---------------------------------------


Answer = Callable[[types.ElicitRequestParams], Awaitable[types.ElicitResult]]


class TasksClient(ClientExtension):
    """Declares the Tasks extension on a `mcp.Client` and resolves a task handle into the call's result: polls
    `tasks/get` at the server's interval, hands a question to `answer` (then `tasks/update`), and sends
    `tasks/cancel` when the waiting call is cancelled. `mcp.Client(url, extensions=[TasksClient(answer=...)])`."""

    identifier = EXTENSION

    def __init__(self, *, answer: Answer | None = None, max_poll_s: float = 5.0,
                 on_task: Callable[[str], None] | None = None) -> None:
        self._answer = answer
        self._max_poll_s = max_poll_s
        self._on_task = on_task  # told each task id as it is created (e.g. to persist it)

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, handle: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        if self._on_task is not None:
            self._on_task(handle.task_id)
        answered: set[str] = set()
        try:
            while True:
                task = await ctx.session.send_request(GetTaskRequest(params=TaskParams(task_id=handle.task_id)),
                                                      GetTaskResult)
                if task.status == "completed" and task.result is not None:
                    return types.CallToolResult.model_validate(task.result, by_name=False)
                if task.status in ("failed", "cancelled", "completed"):
                    why = task.status_message or task.status
                    return types.CallToolResult(content=[types.TextContent(text=f"{task.status}: {why}")],
                                                is_error=True)
                if task.status == "input_required":
                    await self._respond(ctx, task, answered)
                wait_ms = task.poll_interval_ms or 1000  # a server's 0 or 1 ms never makes this a busy loop
                await anyio.sleep(min(max(wait_ms, MIN_POLL_MS) / 1000, self._max_poll_s))
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await ctx.session.send_request(CancelTaskRequest(params=TaskParams(task_id=handle.task_id)),
                                               Acknowledged)
            raise

    async def _respond(self, ctx: ClaimContext, task: GetTaskResult, answered: set[str]) -> None:
        responses: dict[str, Any] = {}
        for key, asked in (task.input_requests or {}).items():
            if key in answered:
                continue  # the extension: a client deduplicates questions across polls
            if self._answer is None:
                raise RuntimeError(f"task {task.task_id[:16]}... asks for input and this client has no answer "
                                   "callback (TasksClient(answer=...))")
            request = types.ElicitRequest.model_validate(asked, by_name=False)
            responses[key] = await self._answer(request.params)
            answered.add(key)
        if responses:
            await ctx.session.send_request(UpdateTaskRequest(params=UpdateTaskParams(
                task_id=task.task_id, input_responses=responses)), Acknowledged)


def now_ms() -> int:
    return int(time.time() * 1000)
