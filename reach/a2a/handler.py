"""The A2A methods over the bus: the SDK's RequestHandler backed by the gateway's admission and status table
(through the port reach.a2a.ports.Host, which the gateway implements).

The SDK's JSON-RPC dispatcher (a2a.server.routes) parses and answers the protocol; this handler maps
each method: send -> an admitted, published Envelope; get -> the status row; stream / subscribe ->
status updates from the receipts until terminal; cancel -> a cancel record (reach.a2a.cancels)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import urlsplit

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.exceptions import HTTPException

from reach.a2a import cards, hints, push, tasks
from reach.a2a.ports import Host, PushBook, Refused
from reach.a2a.states import FINAL, INTERRUPTED, TASK_STATES, state_name, task_state
from reach.callers import CallerApp
from reach.core.progress import Cursor
from reach.envelopes import new_id, now_ms
from reach.errors import InfraUnavailable

APP = "reach.app"  # ServerCallContext.state: the CallerApp the bearer token named
CAPABILITY = "reach.capability"  # ServerCallContext.state: the capability of a /a2a/cap/<capability>/ endpoint
REJECTING = (403, 404, 422)  # refusals that are the message's fault: a rejected task, as the agent would answer
Cancel = Callable[[CallerApp, str], Awaitable[None]]
LIST_PAGE, LIST_MAX = 50, 100  # ListTasks' page when the call names none, and its largest (streams.status.tenants)
CANCEL_WAIT_S = 5.0  # how long cancel waits for the canceled receipt before it returns the task as it is


class ReachRequestHandler(RequestHandler):
    """One per gateway process; the caller and capability come in the call context (reach.gateway.routes_a2a)."""

    def __init__(self, host: Host, *, cancel: Cancel | None = None, push: PushBook | None = None) -> None:
        self._host = host
        self._cancel = cancel
        self._push = push

    # --- send ---------------------------------------------------------------------------------------------

    async def _check_context(self, app: CallerApp, context_id: str) -> None:
        """A context is its trace: one another tenant started is not joined (its messages would sit in that
        tenant's trace). The first member decides; a context nobody used yet is free."""
        code, body = await self._host.trace(context_id)
        if code == 404:
            return
        if code != 200:
            raise HTTPException(503, "the status views do not answer: the context's owner cannot be checked",
                                headers={"Retry-After": "1"})
        first = next(iter(body.get("message_ids", [])), None)
        if first is None:
            return
        row_code, row = await self._host.message(str(first))
        if row_code == 200 and row.get("tenant") != app.tenant:
            raise InvalidParamsError(message=f"context_id {context_id[:100]!r} is in use; start a new context "
                                             "(omit context_id, or send one of your own)")
        if row_code not in (200, 404):
            raise HTTPException(503, "the status views do not answer: the context's owner cannot be checked",
                                headers={"Retry-After": "1"})

    async def _send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        """Admit and publish the message; a Task the caller can follow (or a rejected one: never on the bus)."""
        app = _caller(context)
        message = params.message
        config = None
        if params.configuration.HasField("task_push_notification_config"):
            config = params.configuration.task_push_notification_config
            self._checked_push(config, "0", context)  # a bad config refuses the message before it is sent
            await self._admit_push(app)
        if message.task_id:  # the answer to a task waiting for input (INPUT_REQUIRED): its next turn
            task = await self._answer(app, message)
            return await self._with_push(app, task, config, context)
        try:
            payload = tasks.payload_of(message)
            context_id = tasks.context_id_of(message)
            key = hints.idempotency_key(context.state.get("headers"), message)
            skill, budget = hints.skill_of(message, params.metadata), hints.budget_of(message)
        except (tasks.BadMessage, hints.BadHint) as exc:
            raise InvalidParamsError(message=str(exc)) from None
        capability = context.state.get(CAPABILITY) or (skill.capability if skill else None)
        if not capability:
            raise InvalidParamsError(message="no skill: on the mesh endpoint set metadata.skill_id to a skill of the "
                                             "agent card (or use /a2a/cap/<capability>/)")
        if skill is not None and skill.capability != capability:
            raise InvalidParamsError(message=f"skill_id {skill.capability!r} is not this endpoint's {capability!r}: "
                                             "send it to the mesh endpoint /a2a/, or leave skill_id out")
        if context_id is not None:
            await self._check_context(app, context_id)
        try:
            accepted = await self._host.submit(app, capability=capability, payload=payload, idempotency_key=key,
                                               context_id=context_id, version=skill.version if skill else "*",
                                               max_tokens=budget.max_tokens, max_cost=budget.max_cost)
        except Refused as refusal:
            if refusal.status in REJECTING:
                return tasks.refused_task(new_id(), context_id or new_id(), TaskState.TASK_STATE_REJECTED,
                                          f"{refusal.error}: {refusal.message}")
            if refusal.status in (400, 413):
                raise InvalidParamsError(message=f"{refusal.error}: {refusal.message}") from None
            # quota (429) and unavailable (503): HTTP statuses the caller's retry logic knows, with Retry-After
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None
        # acknowledged by the broker: submitted, whatever the status table has folded by now (a stream then
        # replays the whole timeline, so its updates always read submitted -> working -> final)
        task = tasks.task_of({"message_id": accepted.message_id, "trace_id": accepted.trace_id, "status": "ACCEPTED"})
        return await self._with_push(app, task, config, context)

    async def _answer(self, app: CallerApp, message: Message) -> Task:
        """The message answers the task's question: checked against its schema, it starts the task's next turn
        (reach.ops.turns). A task that is not waiting, unknown, past its deadline or a wrong answer is an error."""
        task_id = message.task_id
        try:
            sent = await self._host.answer(app, task_id, tasks.answer_of(message))
        except tasks.BadMessage as exc:
            raise InvalidParamsError(message=str(exc)) from None
        except Refused as refusal:
            if refusal.status == 404:
                raise TaskNotFoundError(message=f"no task {task_id[:100]!r}: {refusal.message}") from None
            if refusal.status in (400, 409, 410, 413):
                raise InvalidParamsError(message=f"{refusal.error}: {refusal.message}") from None
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None
        return tasks.task_of({"message_id": task_id, "trace_id": sent.trace_id, "status": "ACCEPTED",
                              "generation": sent.generation})

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        if params.configuration.return_immediately:
            return await self._send(params, context)
        with self._slot(self._host.wait, context):  # taken before the send: a blocking send refused sends nothing
            task = await self._send(params, context)
            if task.status.state in FINAL:
                return task
            return await self._until_final(task, context)

    async def _until_final(self, task: Task, context: ServerCallContext) -> Task:
        """Poll the status row until it is terminal, or waits for input in the turn sent (or a later one), or the
        invoke timeout passed (then: the task as it is)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._host.invoke_timeout_s
        turn = _generation(task)
        row: dict[str, Any] | None = None
        while loop.time() < give_up:
            code, body = await self._row(task.id, context)
            if code == 200 and int(body.get("generation") or 0) >= turn:
                row = body
                state = tasks.row_state(body)
                if state in FINAL or state in INTERRUPTED:
                    break
            await asyncio.sleep(self._host.poll_s)
        return tasks.task_of(row) if row is not None else task

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        with self._slot(self._host.stream, context):  # taken before the send: a stream refused sends nothing
            task = await self._send(params, context)
            async for event in self._follow(task, context, sent=0):
                yield event

    @contextlib.contextmanager
    def _slot(self, kind: Callable[[CallerApp], AbstractContextManager[None]],
              context: ServerCallContext) -> Iterator[None]:
        """One of the app's slots of a `kind` (Host.stream: event streams, shared with /v1's; Host.wait: calls
        waiting on a task's row) while the block runs; HTTP 429 when the app holds them all."""
        try:
            slot = kind(_caller(context))
            slot.__enter__()
        except Refused as refusal:
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None
        try:
            yield
        finally:
            slot.__exit__(None, None, None)

    # --- read -----------------------------------------------------------------------------------------------

    async def _row(self, task_id: str, context: ServerCallContext) -> tuple[int, dict[str, Any]]:
        return await self._host.row(_caller(context), task_id)

    async def _found(self, task_id: str, context: ServerCallContext) -> dict[str, Any]:
        """The row; a task sent a moment ago may not be folded yet: wait up to sse_find for it."""
        try:
            code, row = await self._host.find(_caller(context), task_id)
        except Refused as refusal:  # the read quota: 429 with Retry-After, which the caller's retry logic knows
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None
        if code == 404:
            raise TaskNotFoundError(message=f"no task {task_id!r}: {row.get('message', '')}")
        if code != 200:
            raise HTTPException(503, row.get("message", "the status views do not answer"), headers={"Retry-After": "1"})
        return row

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        row = await self._found(params.id, context)
        return tasks.task_of(row, params.history_length if params.HasField("history_length") else None)

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        with self._slot(self._host.stream, context):
            row = await self._found(params.id, context)
            task = tasks.task_of(row)
            if task.status.state in FINAL:
                raise UnsupportedOperationError(message=f"task {params.id} is already "
                                                        f"{state_name(task.status.state)}; get it with GetTask")
            async for event in self._follow(task, context, sent=len(task.history)):
                yield event

    async def _follow(self, task: Task, context: ServerCallContext, *, sent: int) -> AsyncGenerator[Event]:
        """The task, then its status updates from the receipts until a final one (or sse_max: the stream ends
        and the caller resubscribes)."""
        yield task
        if task.status.state in FINAL:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._host.stream_max_s
        last: TaskState | None = task.status.state
        turn = _generation(task)  # an answer's stream follows its own turn: earlier turns are not sent again
        cursor, opened = Cursor(generation=turn), False
        while loop.time() < give_up:
            code, row = await self._row(task.id, context)
            if code == 200 and int(row.get("generation") or 0) >= turn:
                if turn:
                    sent = max(sent, tasks.first_step_of(row, turn))
                partial, cursor, opened = tasks.chunk_events(row, cursor, opened=opened)
                events, sent, last = tasks.updates(row, sent, last)
                for event in [*partial, *events]:  # the chunks before the entry that ends the task
                    yield event
                state = tasks.row_state(row)
                if state in FINAL or state in INTERRUPTED and last == state:
                    return  # ended, or waits for the caller's answer (which continues the task, not this stream)
            await asyncio.sleep(self._host.poll_s)

    # --- cancel -------------------------------------------------------------------------------------------

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        with self._slot(self._host.wait, context):  # it waits for the canceled receipt: taken before the cancel
            row = await self._found(params.id, context)
            if task_state(str(row.get("status", ""))) in FINAL:
                raise TaskNotCancelableError(message=f"task {params.id} is already {row.get('status')}")
            if self._cancel is None:
                raise UnsupportedOperationError(message="this gateway cannot cancel (no cancels topic configured)")
            await self._cancel(_caller(context), params.id)
            loop = asyncio.get_running_loop()
            give_up = loop.time() + CANCEL_WAIT_S
            while loop.time() < give_up and task_state(str(row.get("status", ""))) not in FINAL:
                await asyncio.sleep(self._host.poll_s)
                code, body = await self._row(params.id, context)
                row = body if code == 200 else row
            return tasks.task_of(row)

    # --- list -------------------------------------------------------------------------------------------------

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tenant's tasks (of one context when `context_id` is given), newest update first, filtered by
        state and status time, paged with the token of the last task listed; from the status table's tenant index
        (reach.streams.status.tenants: a tenant's newest tasks, bounded per partition)."""
        app = _caller(context)
        try:  # a read of a page of rows, metered like a /v1 trace read of as many
            await self._host.take_read(app, min(params.page_size, LIST_MAX) if params.page_size > 0 else LIST_PAGE)
        except Refused as refusal:
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None
        query = {"page_size": str(params.page_size), "page_token": params.page_token}
        if params.context_id:
            query["context"] = params.context_id
        if params.status:
            query["status"] = ",".join(sorted(s.value for s, state in TASK_STATES.items()
                                              if state == params.status or state == TaskState.TASK_STATE_INPUT_REQUIRED
                                              and params.status == TaskState.TASK_STATE_AUTH_REQUIRED))
        if params.HasField("status_timestamp_after"):
            query["after"] = str(params.status_timestamp_after.ToMilliseconds())
        code, body = await self._host.tasks(app, query)
        if code == 400:
            raise InvalidParamsError(message=str(body.get("message", "bad ListTasks parameters")))
        if code != 200:
            raise HTTPException(503, "the status views do not answer", headers={"Retry-After": "1"})
        found: list[Task] = []
        for message_id in body.get("message_ids") or []:
            row_code, row = await self._host.row(app, str(message_id))
            if row_code != 200:
                continue  # ended its retention since the index was read
            task = tasks.task_of(row, params.history_length if params.HasField("history_length") else None)
            if params.status and task.status.state != params.status:
                continue  # input- and auth-required share INPUT_REQUIRED; or it changed since the index was read
            if not params.include_artifacts:
                del task.artifacts[:]
            found.append(task)
        return ListTasksResponse(tasks=found, next_page_token=str(body.get("next_page_token") or ""),
                                 page_size=int(body.get("page_size") or 0), total_size=int(body.get("total_size") or 0))

    # --- push notifications (reach.a2a.push, decisions/0042) --------------------------------------------------

    def _book(self) -> PushBook:
        if self._push is None:
            raise PushNotificationNotSupportedError(message="push notifications are not offered on this gateway (no "
                                                            "<ns>.push topic: `reach topics apply`); stream the "
                                                            "task (SubscribeToTask) or poll GetTask")
        return self._push

    def _checked_push(self, config: TaskPushNotificationConfig, default_id: str,
                      context: ServerCallContext) -> push.PushConfig:
        """The config to keep; it also gets progress events when the call activated the push-progress extension."""
        book = self._book()
        progress = cards.PUSH_PROGRESS_EXTENSION in context.requested_extensions
        try:
            checked = push.checked(config, config_id=config.id or default_id, from_step=0, now=now_ms(),
                                   progress=progress)
            host = urlsplit(checked.url).hostname or ""
            why = None if book.allow_private else push.literal_refusal(host)
        except push.BadPushConfig as exc:
            raise InvalidParamsError(message=str(exc)) from None
        if why is not None:
            raise InvalidParamsError(message=f"push url host {host[:100]} is {why}: push notifications go to public "
                                             "addresses only (REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE lets an operator "
                                             "allow private ones)")
        return checked

    async def _admit_push(self, app: CallerApp) -> None:
        """The gateway's admission of a push config: every change of the task becomes a webhook the app sent, so it
        needs the app's right to channel.webhook, its spend limits and a token of its quota (issue 37, finding 1)."""
        try:
            await self._host.admit_push(app)
        except Refused as refusal:
            if refusal.status == 403:
                raise InvalidParamsError(message=f"{refusal.error}: {refusal.message}; push notifications are "
                                                 "webhooks, so the app needs channel.webhook in its capability "
                                                 "list (`reach apps update`)") from None
            raise HTTPException(refusal.status, f"{refusal.error}: {refusal.message}",
                                headers=refusal.headers) from None

    async def _keep(self, app: CallerApp, task_id: str, config: push.PushConfig) -> None:
        """Keep the config (its whole set, acknowledged) and hand the task's row to the sender to catch up."""
        book = self._book()
        current = book.get(task_id) or push.TaskPush(task_id=task_id, tenant=app.tenant)
        try:
            await book.put(current.put(config))
        except push.BadPushConfig as exc:
            raise InvalidParamsError(message=str(exc)) from None
        except InfraUnavailable as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
        code, row = await self._host.row(app, task_id)
        if code == 200:
            book.offer(row)

    async def _with_push(self, app: CallerApp, task: Task, config: TaskPushNotificationConfig | None,
                         context: ServerCallContext) -> Task:
        if config is not None and task.status.state != TaskState.TASK_STATE_REJECTED:
            await self._keep(app, task.id, self._checked_push(config, task.id, context))
        return task

    async def on_create_task_push_notification_config(self, params: TaskPushNotificationConfig,
                                                      context: ServerCallContext) -> TaskPushNotificationConfig:
        await self._found(params.task_id, context)  # the caller's own task (another tenant's reads as absent)
        config = self._checked_push(params, params.task_id, context)
        await self._admit_push(_caller(context))
        await self._keep(_caller(context), params.task_id, config)
        return config.to_proto(params.task_id)

    async def _configs(self, task_id: str, context: ServerCallContext) -> push.TaskPush:
        book = self._book()
        await self._found(task_id, context)
        found = book.get(task_id)
        return found if found is not None and found.tenant == _caller(context).tenant else push.TaskPush(
            task_id=task_id, tenant=_caller(context).tenant)

    async def on_get_task_push_notification_config(self, params: GetTaskPushNotificationConfigRequest,
                                                   context: ServerCallContext) -> TaskPushNotificationConfig:
        config = (await self._configs(params.task_id, context)).get(params.id or params.task_id)
        if config is None:
            raise InvalidParamsError(message=f"task {params.task_id[:100]} has no push config "
                                             f"{(params.id or params.task_id)[:100]!r}; list them with "
                                             "ListTaskPushNotificationConfigs")
        return config.to_proto(params.task_id)

    async def on_list_task_push_notification_configs(
            self, params: ListTaskPushNotificationConfigsRequest,
            context: ServerCallContext) -> ListTaskPushNotificationConfigsResponse:
        configs = (await self._configs(params.task_id, context)).configs
        start = int(params.page_token) if params.page_token.isdigit() else 0
        size = params.page_size if params.page_size > 0 else push.MAX_CONFIGS
        page = configs[start:start + size]
        more = start + size < len(configs)
        return ListTaskPushNotificationConfigsResponse(configs=[c.to_proto(params.task_id) for c in page],
                                                       next_page_token=str(start + size) if more else "")

    async def on_delete_task_push_notification_config(self, params: DeleteTaskPushNotificationConfigRequest,
                                                      context: ServerCallContext) -> None:
        current = await self._configs(params.task_id, context)
        if current.get(params.id or params.task_id) is None:
            return  # deleting what is not there: done, as asked
        try:
            await self._book().put(current.without(params.id or params.task_id))
        except InfraUnavailable as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


def _generation(task: Task) -> int:
    """The turn a task sent by this handler stands for (its metadata `generation`; 0 for a new task)."""
    field = task.metadata.fields.get("generation")
    return int(field.number_value) if field is not None else 0


def _caller(context: ServerCallContext) -> CallerApp:
    app = context.state.get(APP)
    if not isinstance(app, CallerApp):  # the route authenticates before dispatching: never reached unauthenticated
        raise HTTPException(401, "unauthenticated", headers={"WWW-Authenticate": "Bearer"})
    return app
