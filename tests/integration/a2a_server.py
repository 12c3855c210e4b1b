"""A tiny A2A server built with the official a2a-sdk (its DefaultRequestHandler, task store and routes): the
external agent `reach a2a bridge` puts on the bus in tests/integration/test_a2a.py."""

from __future__ import annotations

import threading
import time

import uvicorn
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from starlette.applications import Starlette

from reach.tooling.local.process import free_port


class Upper(AgentExecutor):
    """Answers a text message with `{"upper": TEXT}` as the task's artifact; "fail" fails the task; "ask" stops it in
    input-required ("Which city?") and the answer, sent to the same task, is what it upper-cases (`"answered": true`
    beside it: the task had asked)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                                 status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        updater = TaskUpdater(event_queue=event_queue, task_id=task_id, context_id=context_id)
        await updater.start_work()
        text = context.get_user_input()
        if text == "fail":
            await updater.failed(updater.new_agent_message(parts=[Part(text="asked to fail")]))
            return
        if text == "ask":
            await updater.requires_input(updater.new_agent_message(parts=[Part(text="Which city?")]))
            return
        answered = {"answered": True} if context.current_task is not None else {}  # the answer to its question
        await updater.add_artifact(parts=[Part(data=ParseDict({"upper": text.upper(), **answered}, Value()))],
                                   name="result", last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue=event_queue, task_id=context.task_id or "",
                          context_id=context.context_id or "").cancel()


class UpperServer:
    """The server on a free loopback port, in a thread of this process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        card = AgentCard(name="upper", description="upper-cases text", version="1.0.0",
                         supported_interfaces=[AgentInterface(url=self.url, protocol_binding="JSONRPC",
                                                              protocol_version="1.0")],
                         capabilities=AgentCapabilities(streaming=False, push_notifications=False),
                         default_input_modes=["text/plain"], default_output_modes=["application/json"],
                         skills=[AgentSkill(id="upper", name="upper", description="upper-cases text",
                                            tags=["text"], examples=["hello"])])
        handler = DefaultRequestHandler(agent_executor=Upper(), task_store=InMemoryTaskStore(), agent_card=card)
        app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="a2a-upper", daemon=True)

    def start(self) -> UpperServer:
        self.thread.start()
        give_up = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > give_up or not self.thread.is_alive():
                raise AssertionError("the A2A test server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
