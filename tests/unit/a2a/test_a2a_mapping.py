"""The pure A2A mappings: every receipt status has a task state, message parts -> payload, rows -> tasks and
stream updates, and the bearer token check."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types.a2a_pb2 import Message, Part, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from reach.a2a import tasks
from reach.a2a.bearer import DENIED, BearerAuthenticator, a2a_token
from reach.a2a.cards import DEPENDS_EXTENSION, capability_card, mesh_card
from reach.a2a.states import TASK_STATES, task_state
from reach.callers import AuthFailure, KeyEntry
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable
from reach.gateway import catalog
from reach.records import AgentRegistration, AgentState, Capability, Status
from tests.unit.gateway.fakes import FakeDirectory, app

S = TaskState


def test_every_status_has_a_task_state_as_the_issue_table_says() -> None:
    assert set(TASK_STATES) == set(Status)
    expected = {S.TASK_STATE_SUBMITTED: {"ACCEPTED", "ROUTED", "RETRY_SCHEDULED", "INTENT_RESOLVED"},
                S.TASK_STATE_WORKING: {"STARTED", "ATTEMPT_FAILED", "FANNED_OUT"},
                S.TASK_STATE_COMPLETED: {"COMPLETED"},
                S.TASK_STATE_FAILED: {"FAILED", "EXPIRED", "DEAD_LETTERED"},
                S.TASK_STATE_REJECTED: {"REJECTED", "UNROUTABLE"}, S.TASK_STATE_CANCELED: {"CANCELED"}}
    for state, statuses in expected.items():
        assert {s.value for s, t in TASK_STATES.items() if t == state} == statuses
    assert task_state("FROM_THE_FUTURE") == S.TASK_STATE_UNSPECIFIED


def test_parts_become_the_payload() -> None:
    data = Message(parts=[Part(data=ParseDict({"a": [1, 2]}, Value()))])
    assert tasks.payload_of(data) == {"a": [1, 2]}
    assert tasks.payload_of(Message(parts=[Part(text="hel"), Part(text="lo")])) == {"text": "hello"}
    for bad, why in ((Message(), "no parts"), (Message(parts=[Part(url="http://x/y")]), "file/url/raw"),
                     (Message(parts=[Part(text="a"), Part(data=ParseDict({}, Value()))]), "one data part")):
        with pytest.raises(tasks.BadMessage, match=why):
            tasks.payload_of(bad)
    with pytest.raises(tasks.BadMessage, match="context_id"):
        tasks.context_id_of(Message(context_id="x" * 201))


def _row(status: str, timeline: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    return {"message_id": "m1", "trace_id": "ctx", "status": status, "updated_at": 1_000,
            "timeline": [{"status": s, "attempt": a, "generation": 0, "at": i} for i, (s, a) in enumerate(timeline)],
            **extra}


RETRIED = [("ACCEPTED", 1), ("ROUTED", 1), ("STARTED", 1), ("ATTEMPT_FAILED", 1), ("RETRY_SCHEDULED", 1),
           ("ROUTED", 2), ("STARTED", 2), ("COMPLETED", 2)]


def test_a_row_is_a_task_with_its_timeline_as_history_and_the_result_as_artifact() -> None:
    task = tasks.task_of(_row("COMPLETED", RETRIED, result='{"ok":true}'))
    assert (task.id, task.context_id, task.status.state) == ("m1", "ctx", S.TASK_STATE_COMPLETED)
    assert [m.metadata["status"] for m in task.history] == [s for s, _ in RETRIED]
    assert MessageToDict(task.artifacts[0].parts[0].data) == {"ok": True}
    assert len(tasks.task_of(_row("COMPLETED", RETRIED), history_length=2).history) == 2
    failed = tasks.task_of(_row("FAILED", [("FAILED", 1)], last_error={"kind": "BUSINESS", "code": "NO",
                                                                       "message": "nope"}))
    assert failed.status.state == S.TASK_STATE_FAILED and "NO: nope" in failed.status.message.parts[0].text
    assert not failed.artifacts


def test_stream_updates_follow_state_changes_in_order_and_end_with_the_artifact() -> None:
    row = _row("COMPLETED", RETRIED, result='"done"')
    events, sent, last = tasks.updates(row, 0, S.TASK_STATE_SUBMITTED)
    kinds = [("artifact" if hasattr(e, "artifact") and e.HasField("artifact") else S.Name(e.status.state))
             for e in events]
    assert kinds == ["TASK_STATE_WORKING", "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "artifact",
                     "TASK_STATE_COMPLETED"]
    assert sent == len(RETRIED) and last == S.TASK_STATE_COMPLETED
    partial = _row("STARTED", RETRIED[:3])
    first, sent, last = tasks.updates(partial, 0, S.TASK_STATE_SUBMITTED)
    assert [S.Name(e.status.state) for e in first] == ["TASK_STATE_WORKING"]
    assert tasks.updates(partial, sent, last)[0] == []  # nothing new: nothing sent twice


def test_the_bearer_token_is_key_id_dot_a_token_derived_from_a_live_key() -> None:
    directory = FakeDirectory([KeyEntry("key_1", app(), b"rs_good")])
    bearer = BearerAuthenticator(directory)
    good = a2a_token("key_1", b"rs_good")
    assert good.startswith("key_1.rat_") and "rs_good" not in good
    assert bearer.authenticate(f"Bearer {good}") == app()
    outcomes = [bearer.authenticate(h) for h in (None, "Basic abc", "Bearer key_1", "Bearer key_1.rat_bad",
                                                  f"Bearer key_2.{good.partition('.')[2]}", "Bearer " + "x" * 600)]
    assert [o.code for o in outcomes if isinstance(o, AuthFailure)] == ["missing", "malformed", "malformed",
                                                                       "denied", "denied", "malformed"]
    directory.alive = False
    with pytest.raises(InfraUnavailable, match="apps directory"):
        bearer.authenticate(f"Bearer {good}")


def test_the_signing_secret_itself_is_not_an_a2a_token() -> None:
    """Issue 28, finding 12: the A2A bearer was the app's HMAC secret, so a leaked A2A token signed /v1 requests."""
    bearer = BearerAuthenticator(FakeDirectory([KeyEntry("key_1", app(), b"rs_good")]))
    assert bearer.authenticate("Bearer key_1.rs_good") == DENIED


def test_cards_have_one_skill_per_live_capability_and_follow_versions() -> None:
    caps = [Capability(name="demo.echo", version="1.0.0", tags=["demo"],
                       input_schema='{"type":"object","properties":{"text":{"type":"string"}}}'),
            Capability(name="demo.echo", version="1.2.0"), Capability(name="demo.calc", version="2.0.0",
                                                                     input_schema='{"type":"object","required":["n"]}'),
            Capability(name="channel.webhook", version="1.0.0")]
    card = mesh_card("http://gw:8080/", caps)
    assert [s.id for s in card.skills] == ["demo.calc", "demo.echo"]  # channels only for apps that list them
    assert card.supported_interfaces[0].url == "http://gw:8080/a2a/"
    echo = card.skills[1]
    assert "1.2.0, 1.0.0" in echo.description and list(echo.input_modes) == ["application/json", "text/plain"]
    assert list(card.skills[0].input_modes) == ["application/json"]  # {"text": ...} would break its contract
    one = capability_card("http://gw:8080", "demo.calc", caps)
    assert one is not None and one.supported_interfaces[0].url == "http://gw:8080/a2a/cap/demo.calc/"
    assert capability_card("http://gw:8080", "demo.gone", caps) is None
    assert not card.capabilities.push_notifications and card.capabilities.streaming


def test_cards_show_what_each_skill_calls() -> None:
    """depends_on (issue 41 item 3) on the card: in the skill's description and as the depends-on extension's params,
    only for capabilities that are live (a dependency list of a capability nobody serves is not shown)."""
    caps = [Capability(name="demo.plan", version="1.0.0"), Capability(name="demo.echo", version="1.0.0")]
    depends = {"demo.plan": ["demo.echo", "demo.search@^2"], "demo.gone": ["demo.echo"]}
    card = mesh_card("http://gw", caps, depends=depends)
    plan = next(s for s in card.skills if s.id == "demo.plan")
    assert "calls demo.echo, demo.search@^2" in plan.description
    assert "calls" not in next(s for s in card.skills if s.id == "demo.echo").description
    declared = {e.uri: MessageToDict(e.params) for e in card.capabilities.extensions}
    assert declared[DEPENDS_EXTENSION] == {"demo.plan": ["demo.echo", "demo.search@^2"]}
    one = capability_card("http://gw", "demo.plan", caps, depends=depends)
    assert one is not None and "calls demo.echo" in one.skills[0].description
    assert {e.uri: MessageToDict(e.params) for e in one.capabilities.extensions}[DEPENDS_EXTENSION] == {
        "demo.plan": ["demo.echo", "demo.search@^2"]}
    alone = capability_card("http://gw", "demo.echo", caps, depends=depends)
    assert alone is not None and DEPENDS_EXTENSION not in {e.uri for e in alone.capabilities.extensions}


def test_the_catalog_merges_the_live_instances_depends_on() -> None:
    view = RegistryView()
    now = 1_000_000
    for instance, build, needs in (("i1", "1", ["demo.echo"]), ("i2", "2", ["demo.search", "demo.echo"])):
        view.apply(instance, AgentRegistration(agent_id="planner", instance_id=instance, build_version=build,
                                     capabilities=[Capability(name="demo.plan", version="1.0.0")],
                                     heartbeat_at=now, ttl_ms=60_000, inbox_topic="x", depends_on=needs,
                                     state=AgentState.READY))
    assert catalog.dependencies(view, now) == {"demo.plan": ["demo.echo", "demo.search"]}
    assert catalog.dependencies(view, now + 121_000) == {}  # nobody heard from within 2 x ttl: nobody live


def test_a_question_is_input_required_with_the_question_and_ends_a_stream_at_it() -> None:
    asked = [("ROUTED", 1), ("STARTED", 1), ("INPUT_REQUIRED", 1)]
    row = {**_row("INPUT_REQUIRED", asked), "generation": 0,
           "input": {"question": "What is your name?", "answer_schema": '{"type":"object"}', "turn": 1}}
    task = tasks.task_of(row)
    assert task.status.state == S.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.parts[0].text == "What is your name?"
    assert MessageToDict(task.status.message.parts[1].data) == {"answer_schema": {"type": "object"}}
    events, sent, last = tasks.updates(row, 0, S.TASK_STATE_SUBMITTED)
    assert [S.Name(e.status.state) for e in events] == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
    assert events[-1].status.message.parts[0].text == "What is your name?" and last == S.TASK_STATE_INPUT_REQUIRED
    answered = {**row, "generation": 1, "status": "STARTED",
                "timeline": [*row["timeline"], *(_row("STARTED", [("ACCEPTED", 1), ("STARTED", 1)])["timeline"])]}
    for step in answered["timeline"][3:]:
        step["generation"] = 1
    assert tasks.first_step_of(answered, 1) == 3 and tasks.first_step_of(answered, 2) == 5


def test_an_answered_authorization_question_stays_auth_required_in_the_history() -> None:
    timeline = _row("COMPLETED", [("ROUTED", 1), ("STARTED", 1), ("INPUT_REQUIRED", 1), ("ACCEPTED", 1),
                                  ("STARTED", 1), ("COMPLETED", 1)])["timeline"]
    for step in timeline[3:]:
        step["generation"] = 1
    turn = {"turn": 1, "generation": 1, "question": "Approve the charge", "answer": '{"grant":"g"}', "at": 5}
    auth = {**_row("COMPLETED", []), "generation": 1, "timeline": timeline, "turns": [{**turn, "auth": True}]}
    events, _, _ = tasks.updates(auth, 0, S.TASK_STATE_SUBMITTED)
    states = [S.Name(e.status.state) for e in events if e.HasField("status")]
    assert "TASK_STATE_AUTH_REQUIRED" in states and "TASK_STATE_INPUT_REQUIRED" not in states, states
    # a row folded before turns said so (no "auth"), or an input question: input-required, as before
    plain = {**auth, "turns": [turn]}
    events, _, _ = tasks.updates(plain, 0, S.TASK_STATE_SUBMITTED)
    states = [S.Name(e.status.state) for e in events if e.HasField("status")]
    assert "TASK_STATE_INPUT_REQUIRED" in states and "TASK_STATE_AUTH_REQUIRED" not in states, states
