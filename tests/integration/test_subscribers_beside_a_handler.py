"""Subscribers beside a handler (issue 41 item 2, decision 0076) on the real broker and Redis: one agent handles
`test.order.placed`, three subscribe to it (no filter, a tag filter, a JSONPath filter). Each request ends by the
handler's result; every subscriber whose filter the request passes is notified once, with its own message and
receipts; a subscriber that fails changes nothing of the request's ending."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from typer.testing import CliRunner

from reach.agent import Agent, BusinessError, Context
from reach.cli import app as reach_app
from reach.client import Client
from reach.names import Names
from reach.records import CapabilityMode, Status
from tests.integration.agent_support import Receipts, all_running, owning_partitions, wait_for
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
CAP = "test.order.placed"
HANDLER, ALL, URGENT, BIG = ("agent://test/orders", "agent://test/ledger", "agent://test/pager", "agent://test/fraud")


class Seen:
    """What each subscriber was notified of: agent -> [(order id, its message id, the request it observes)]."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by: dict[str, list[tuple[str, str, str | None]]] = {}

    def add(self, agent_id: str, payload: dict[str, Any], ctx: Context) -> None:
        with self.lock:
            self.by.setdefault(agent_id, []).append(
                (payload["order"], ctx.envelope.message_id, ctx.envelope.parent_id))

    def orders(self, agent_id: str) -> list[str]:
        with self.lock:
            return sorted(o for o, _m, _p in self.by.get(agent_id, []))


def _agents(seen: Seen) -> list[Agent]:
    handler = Agent(HANDLER, ttl_ms=3000, drain_grace_s=5)

    @handler.capability(CAP, version="1.0.0", input_schema={"type": "object"})
    def place(payload: dict[str, Any]) -> dict[str, Any]:
        return {"placed": payload["order"]}

    agents = [handler]
    for agent_id, filter_ in ((ALL, None), (URGENT, "tags:urgent"), (BIG, "$[?(@.amount > 100)]")):
        agent = Agent(agent_id, ttl_ms=3000, drain_grace_s=5)
        agent.capability(CAP, version="1.0.0", input_schema={"type": "object"}, mode=CapabilityMode.SUBSCRIBE,
                         filter=filter_)(_observer(seen, agent_id))
        agents.append(agent)
    return agents


def _observer(seen: Seen, agent_id: str) -> Any:
    def observe(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        seen.add(agent_id, payload, ctx)
        if agent_id == ALL and payload["order"] == "o-fails":
            raise BusinessError("LEDGER_CLOSED", "the ledger refuses this one")
        return {"noted": payload["order"]}
    return observe


def test_the_handler_ends_each_request_and_each_subscriber_is_notified_of_what_passes_its_filter(
        namespace: str, stream_app: StreamApp) -> None:
    names, seen = Names(namespace), Seen()
    agents = _agents(seen)
    with all_running(agents), Client() as client:
        wait_for(lambda: owning_partitions(names, agents), 60, "the handler and three subscribers READY")
        results = {
            "o-plain": client.invoke(CAP, {"order": "o-plain", "amount": 5}, timeout_ms=30_000),
            "o-urgent": client.invoke(CAP, {"order": "o-urgent", "amount": 5}, tags=["urgent"], timeout_ms=30_000),
            "o-big": client.invoke(CAP, {"order": "o-big", "amount": 500}, timeout_ms=30_000),
            "o-fails": client.invoke(CAP, {"order": "o-fails", "amount": 1}, timeout_ms=30_000),
        }
        wait_for(lambda: len(seen.orders(ALL)) >= 4 and seen.orders(URGENT) and seen.orders(BIG), 60,
                 "the notifications run")
        notes = {o: (m, p) for o, m, p in seen.by[ALL]}
        reader = Receipts(names.receipts)
        receipts = reader.wait_status([m for o, (m, _p) in notes.items() if o != "o-fails"], Status.COMPLETED,
                                      timeout=30)
        failed = reader.wait_status([notes["o-fails"][0]], Status.FAILED, timeout=30)
        note_id, request_id = notes["o-fails"][0], notes["o-fails"][1] or ""
        row = wait_for(lambda: _row(stream_app, request_id, "COMPLETED"), 30, "the request's row COMPLETED")
        traced = wait_for(lambda: _traced(row["trace_id"]) >= {request_id, note_id} or None, 30,
                          "the trace listing the request and its notification")
    assert results == {o: {"placed": o} for o in results}, "every request ends by the handler's result"
    assert seen.orders(ALL) == ["o-big", "o-fails", "o-plain", "o-urgent"], "no filter: every request, once each"
    assert seen.orders(URGENT) == ["o-urgent"], "tags:urgent: the request tagged urgent only"
    assert seen.orders(BIG) == ["o-big"], "$[?(@.amount > 100)]: the big order only"
    for message_id, parent in notes.values():
        assert parent is not None and message_id == f"{parent}-n0-test.ledger", "its own message, naming the request"
    assert len(receipts) >= 3, "the notifications have their own receipts"
    [ending] = [r for r in failed[notes["o-fails"][0]] if r.status is Status.FAILED]
    assert ending.error is not None and ending.error.code == "LEDGER_CLOSED", \
        "the subscriber's failure is its notification's ending; the request itself COMPLETED by its handler"
    assert row["result"] is not None and json.loads(row["result"]) == {"placed": "o-fails"}
    assert traced, "reach trace shows the request and its notification"


def _row(app: StreamApp, message_id: str, status: str) -> dict[str, Any] | None:
    found = app.get(f"/messages/{message_id}")
    return found if isinstance(found, dict) and found.get("status") == status else None


def _traced(trace_id: str) -> set[str]:
    shown = CliRunner().invoke(reach_app, ["trace", trace_id, "--json"])
    return {m["message_id"] for m in json.loads(shown.stdout)["messages"]} if shown.exit_code == 0 else set()
