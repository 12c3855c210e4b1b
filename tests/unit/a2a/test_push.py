"""The push configs and their notifications (reach.a2a.push, pure): checks, the record's round trip, the cap, the
notifications a row owes a config (each change once, ids derived, a config set later starts at its step), and the
webhook envelope they become; and the stream artifact's chunk events (reach.a2a.tasks.chunk_events)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from a2a.types.a2a_pb2 import AuthenticationInfo, TaskPushNotificationConfig

from reach.a2a import push, tasks
from reach.core.progress import Cursor


def row(*statuses: str, dropped: int = 0, result: str | None = None) -> dict[str, Any]:
    steps = [{"status": s, "attempt": 1, "generation": 0, "at": i} for i, s in enumerate(statuses)]
    return {"message_id": "m1", "trace_id": "t1", "tenant": "acme", "status": statuses[-1], "timeline": steps,
            "dropped_steps": dropped, "updated_at": 5, "result": result}


CONFIG = push.PushConfig(id="c1", url="https://r.example/a2a", token="tk")


def test_checked_keeps_a_good_config_and_says_what_is_wrong_with_a_bad_one() -> None:
    good = push.checked(TaskPushNotificationConfig(url="https://r.example/a2a", token="tk"), config_id="c1",
                        from_step=3, now=9)
    assert (good.id, good.url, good.token, good.from_step, good.created_at) == ("c1", CONFIG.url, "tk", 3, 9)
    for proto, why in ((TaskPushNotificationConfig(url="file:///etc/passwd"), "not an http"),
                       (TaskPushNotificationConfig(url="https://r.example/" + "x" * 3000), "not an http"),
                       (TaskPushNotificationConfig(url="https://r.example/", token="a\nb"), "line break"),
                       (TaskPushNotificationConfig(url="https://r.example/",
                                                   authentication=AuthenticationInfo(scheme="Bearer")),
                        "authentication is not offered")):
        with pytest.raises(push.BadPushConfig, match=why):
            push.checked(proto, config_id="c1", from_step=0, now=0)
    with pytest.raises(push.BadPushConfig, match="not printable"):
        push.checked(TaskPushNotificationConfig(url="https://r.example/"), config_id="a\x00", from_step=0, now=0)


def test_literal_addresses_are_judged_by_the_webhook_channels_rule_and_names_are_left_to_it() -> None:
    assert push.literal_refusal("127.0.0.1") == "a loopback address"
    assert push.literal_refusal("169.254.169.254") == "a cloud metadata address"
    assert push.literal_refusal("93.184.215.14") is None
    assert push.literal_refusal("r.example") is None  # resolved and judged by the channel at every send


def test_the_record_round_trips_and_the_cap_holds() -> None:
    task = push.TaskPush(task_id="m1", tenant="acme").put(CONFIG)
    raw = task.encode()
    assert raw is not None and push.TaskPush.decode(raw) == task
    assert task.without("c1").encode() is None  # no config left: a tombstone
    full = task
    for n in range(push.MAX_CONFIGS - 1):
        full = full.put(push.PushConfig(id=f"x{n}", url=CONFIG.url))
    with pytest.raises(push.BadPushConfig, match="the most a task may have"):
        full.put(push.PushConfig(id="one-more", url=CONFIG.url))
    assert len(full.put(push.PushConfig(id="c1", url=CONFIG.url + "/v2")).configs) == push.MAX_CONFIGS


def test_each_status_change_is_owed_once_under_the_same_ids_as_the_row_grows() -> None:
    early = push.notifications(row("ACCEPTED", "ROUTED", "STARTED"), CONFIG)
    late = push.notifications(row("ACCEPTED", "ROUTED", "STARTED", "COMPLETED", result='{"a": 1}'), CONFIG)
    assert [n.message_id for n in late[:len(early)]] == [n.message_id for n in early]  # a prefix: the same ids
    kinds = [next(iter(n.body)) for n in late]
    assert kinds == ["statusUpdate", "statusUpdate", "artifactUpdate", "statusUpdate"]
    states = [n.body["statusUpdate"]["status"]["state"] for n in late if "statusUpdate" in n.body]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert len({n.message_id for n in late}) == len(late)
    assert late[2].message_id == push.notification_id("m1", "c1", 3, True)
    other = push.notifications(row("ACCEPTED"), push.PushConfig(id="c2", url=CONFIG.url))
    assert other[0].message_id != early[0].message_id  # one notification per config


def test_a_config_set_later_starts_at_its_step_counting_dropped_ones() -> None:
    later = push.PushConfig(id="c1", url=CONFIG.url, from_step=4)
    grown = row("ACCEPTED", "ROUTED", "STARTED", "COMPLETED", result='"x"', dropped=2)  # steps 2..5 kept
    owed = push.notifications(grown, later)
    assert [n.step for n in owed] == [4, 5, 5]  # working (step 4), then the result artifact and completed (step 5)
    assert push.step_count(grown) == 6


def test_the_envelope_goes_to_the_webhook_channel_in_the_tasks_trace_with_the_token() -> None:
    task = push.TaskPush(task_id="m1", tenant="acme", configs=(CONFIG,))
    [first, *_] = push.notifications(row("ACCEPTED"), CONFIG)
    envelope = push.envelope(first, CONFIG, task, trace_id="t1", now=100)
    assert (envelope.capability, envelope.tenant, envelope.trace_id, envelope.parent_id) == (
        "channel.webhook", "acme", "t1", "m1")
    assert envelope.message_id == envelope.idempotency_key == first.message_id
    assert envelope.routing.session_key == "push:m1"
    payload = json.loads(envelope.payload)
    assert payload["endpoint"] == CONFIG.url and payload["headers"] == {push.TOKEN_HEADER: "tk"}
    assert payload["body"]["statusUpdate"]["taskId"] == "m1"
    tokenless = push.envelope(first, push.PushConfig(id="c1", url=CONFIG.url), task, trace_id="t1", now=100)
    assert "headers" not in json.loads(tokenless.payload)


def test_chunks_open_the_stream_artifact_then_append_in_order() -> None:
    chunks = [{"seq": i, "kind": "text", "data": w, "append": True} for i, w in enumerate(["a ", "b ", "c"])]
    progressing = {**row("ACCEPTED", "STARTED"), "progress": {"attempt": 1, "chunks": chunks[:2], "next_seq": 2}}
    events, cursor, opened = tasks.chunk_events(progressing, Cursor(), opened=False)
    assert [(e.artifact.parts[0].text, e.append) for e in events] == [("a ", False), ("b ", True)]
    assert opened and events[0].artifact.artifact_id == "m1:stream:0"
    more = {**progressing, "progress": {"attempt": 1, "chunks": chunks, "next_seq": 3}}
    events, cursor, opened = tasks.chunk_events(more, cursor, opened=opened)
    assert [(e.artifact.parts[0].text, e.append) for e in events] == [("c", True)]
    retried = {**progressing, "progress": {"attempt": 2, "chunks": [{**chunks[0], "data": "z"}], "next_seq": 1}}
    events, _, _ = tasks.chunk_events(retried, cursor, opened=opened)
    assert [(e.artifact.parts[0].text, e.append) for e in events] == [("z", False)]  # a retry starts over
    nothing, same, _ = tasks.chunk_events(row("ACCEPTED"), cursor, opened=True)
    assert nothing == [] and same == cursor


def test_a_progress_config_gets_the_chunks_and_the_last_fraction_not_the_states() -> None:
    chunks = [{"seq": 0, "kind": "text", "data": "a ", "append": True},
              {"seq": 1, "kind": "json", "data": '{"n": 1}', "append": True}]
    progressing = {**row("ACCEPTED", "STARTED"), "capability": "demo.write",
                   "progress": {"attempt": 1, "fraction": 0.5, "note": "half", "at": 77, "chunks": chunks,
                                "next_seq": 2}}
    config = push.PushConfig(id="cb", url=CONFIG.url, states=False, progress=True)
    owed = push.notifications(progressing, config)
    assert [n.body["event"] for n in owed] == ["progress", "chunk", "chunk"]
    assert owed[0].body["fraction"] == 0.5 and owed[0].body["note"] == "half"
    assert [n.body["data"] for n in owed[1:]] == ["a ", {"n": 1}]
    assert owed[1].body["message_id"] == "m1" and owed[1].body["capability"] == "demo.write"
    assert [n.message_id for n in push.notifications(progressing, config)] == [n.message_id for n in owed]
    both = push.notifications(progressing, dataclasses.replace(config, states=True))
    assert len(both) == len(owed) + 2  # submitted and working too
    assert push.notifications(row("ACCEPTED"), config) == []
