"""A2A ListTasks over in-memory fakes with the official SDK client: the caller's tenant's tasks (of a context, or
all of them) from the status table's tenant index, newest update first, paged, filtered by state and status time;
another tenant lists none of them; each call takes a read of the app's quota."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import ListTasksRequest, TaskState
from a2a.utils.errors import A2AError
from google.protobuf.timestamp_pb2 import Timestamp

from reach.a2a.bearer import a2a_token
from reach.callers import KeyEntry
from tests.unit.gateway.fakes import Fakes, app
from tests.unit.gateway.test_a2a_routes import Following, events, run, send_request


@pytest.fixture
def fakes() -> Fakes:
    made = Fakes()
    made.status = Following(made)
    return made


def test_a_contexts_tasks_are_listed_for_their_tenant_paged_and_filtered(fakes: Fakes) -> None:
    fakes.directory.keys["key2"] = KeyEntry("key2", app("app2", tenant="globex"), b"secret-2")

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        ids = []
        for n, text in enumerate(("a", "b", "c")):
            sent = send_request(text)
            sent.message.context_id = "chat-1"
            [done] = await events(client, sent)
            ids.append(done.task.id)
            fakes.status.rows[done.task.id][0]["updated_at"] = 1_000 * (n + 1)
        ids.reverse()  # the newest update first, as the A2A spec orders them
        fakes.status.traces["chat-1"] = ids
        first = await client.list_tasks(ListTasksRequest(context_id="chat-1", page_size=2))
        assert [t.id for t in first.tasks] == ids[:2] and first.total_size == 3 and first.next_page_token
        rest = await client.list_tasks(ListTasksRequest(context_id="chat-1", page_size=2,
                                                        page_token=first.next_page_token))
        assert [t.id for t in rest.tasks] == ids[2:] and rest.next_page_token == ""
        assert all(not t.artifacts for t in first.tasks)  # only when include_artifacts
        full = await client.list_tasks(ListTasksRequest(context_id="chat-1", include_artifacts=True))
        assert all(t.artifacts for t in full.tasks)
        working = await client.list_tasks(ListTasksRequest(context_id="chat-1", status=TaskState.TASK_STATE_WORKING))
        assert list(working.tasks) == []
        none = await client.list_tasks(ListTasksRequest(context_id="no-such-context"))
        assert list(none.tasks) == [] and none.total_size == 0
        [other] = await events(client, send_request("elsewhere"))  # another context, updated last
        fakes.status.rows[other.task.id][0]["updated_at"] = 5_000
        everything = await client.list_tasks(ListTasksRequest())  # no context: all of the tenant's tasks
        assert [t.id for t in everything.tasks] == [other.task.id, *ids] and everything.total_size == 4
        recent = await client.list_tasks(ListTasksRequest(status_timestamp_after=Timestamp(seconds=2)))
        assert [t.id for t in recent.tasks] == [other.task.id, *ids[:2]]  # updated at 2 s or later
        with pytest.raises(A2AError, match="page_token"):
            await client.list_tasks(ListTasksRequest(page_token="not-ours"))
        rival = await connect(token=a2a_token("key2", b"secret-2"))
        theirs = await rival.list_tasks(ListTasksRequest(context_id="chat-1"))
        assert list(theirs.tasks) == []  # another tenant's tasks are not listed

    run(fakes, scenario)


def test_listing_takes_a_read_of_the_apps_quota(fakes: Fakes) -> None:
    fakes.quotas.read_shape = (0.001, 1)  # one read, then none for a long while

    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        await client.list_tasks(ListTasksRequest(context_id="chat-1"))
        with pytest.raises(A2AClientError, match="429"):
            await client.list_tasks(ListTasksRequest(context_id="chat-1"))

    run(fakes, scenario)


def test_a_task_updated_between_two_pages_is_not_listed_twice(fakes: Fakes) -> None:
    async def scenario(connect: Callable[..., Awaitable[Any]]) -> None:
        client = await connect()
        ids = []
        for n in range(3):
            [done] = await events(client, send_request(str(n)))
            ids.append(done.task.id)
            fakes.status.rows[done.task.id][0]["updated_at"] = 1_000 * (n + 1)
        first = await client.list_tasks(ListTasksRequest(page_size=2))
        assert [t.id for t in first.tasks] == [ids[2], ids[1]]
        fakes.status.rows[ids[1]][0]["updated_at"] = 9_000  # listed already; moves above the cursor
        rest = await client.list_tasks(ListTasksRequest(page_size=2, page_token=first.next_page_token))
        assert [t.id for t in rest.tasks] == [ids[0]] and rest.next_page_token == ""
        auth = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_AUTH_REQUIRED))
        assert list(auth.tasks) == [] and fakes.status.tenant_queries[-1]["status"] == "INPUT_REQUIRED"

    run(fakes, scenario)
