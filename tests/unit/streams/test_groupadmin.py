"""The group admin child: a child that aborts fails only its pending requests, and the next request gets a new one."""

from __future__ import annotations

import concurrent.futures
import io
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from reach.settings import KafkaSettings
from reach.streams import groupadmin
from reach.streams.groupadmin import GroupAdmin, GroupAdminError, child_main, settings_payload

# a stand-in child speaking the same protocol: `die` aborts it (as librdkafka's assertion does), `mute` never
# answers, anything else has two members
FAKE_CHILD = r"""
import json, os, sys
settings = json.loads(sys.stdin.readline())
for line in sys.stdin:
    req = json.loads(line)
    if req["group"] == "die":
        os.abort()
    if req["group"] == "mute":
        continue
    if req["group"] == "odd":
        print(json.dumps({"id": req["id"], "ok": {"state": "?"}}), flush=True)
        continue
    if req["op"] == "describe":
        ok = {"group_id": req["group"], "state": "STABLE", "members": [
            {"client_id": "reach-status http://a", "partitions": [["t", 0], ["t", 1]]},
            {"client_id": settings["bootstrap"], "partitions": []}]}
    else:
        ok = {"group_id": req["group"], "offsets": [["t", 0, 42]]}
    print(json.dumps({"id": req["id"], "ok": ok}), flush=True)
"""


@pytest.fixture
def admin() -> Any:
    made = GroupAdmin(KafkaSettings(bootstrap="b:9092"), command=[sys.executable, "-c", FAKE_CHILD])
    yield made
    made.close()


def test_describe_and_offsets_come_back_shaped_like_confluent_kafka(admin: GroupAdmin) -> None:
    desc = admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result(10)
    assert [m.client_id for m in desc.members] == ["reach-status http://a", "b:9092"]  # the settings reached it
    assert [(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions] == [("t", 0), ("t", 1)]
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")], request_timeout=5)["g"]
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets.result(10).topic_partitions] == [("t", 0, 42)]


def test_a_child_that_aborts_fails_its_requests_and_the_next_request_starts_another(admin: GroupAdmin) -> None:
    assert admin.describe_consumer_groups(["g"])["g"].result(10).members
    dying = admin.describe_consumer_groups(["die"])["die"]
    with pytest.raises(GroupAdminError, match="exited"):
        dying.result(10)
    deadline = time.monotonic() + 10
    while True:  # within RESTART_AFTER_S of the death a request fails at once; then a new child answers
        try:
            desc = admin.describe_consumer_groups(["g"])["g"].result(10)
            break
        except GroupAdminError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert len(desc.members) == 2
    assert admin.restarts == 1


def test_a_request_never_answered_fails_after_its_timeout(admin: GroupAdmin,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupadmin, "GRACE_S", 0.2)
    with pytest.raises(GroupAdminError, match="no answer"):
        admin.describe_consumer_groups(["mute"], request_timeout=0.1)["mute"].result(10)
    assert admin.describe_consumer_groups(["g"])["g"].result(10).members  # the same child goes on


def test_a_child_that_stops_answering_is_replaced(admin: GroupAdmin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupadmin, "GRACE_S", 0.1)
    assert admin.describe_consumer_groups(["g"])["g"].result(10).members
    for _ in range(groupadmin.HUNG_AFTER):  # alive, but every request left unanswered: as if stuck in librdkafka
        with pytest.raises(GroupAdminError, match="no answer"):
            admin.describe_consumer_groups(["mute"], request_timeout=0.05)["mute"].result(10)
    deadline = time.monotonic() + 10
    while True:
        try:
            assert admin.describe_consumer_groups(["g"])["g"].result(10).members
            break
        except GroupAdminError:
            assert time.monotonic() < deadline, "no new child answered"
            time.sleep(0.1)
    assert admin.restarts == 1


def test_an_odd_answer_fails_its_request_and_the_child_goes_on(admin: GroupAdmin) -> None:
    with pytest.raises(GroupAdminError, match="oddly"):
        admin.describe_consumer_groups(["odd"])["odd"].result(10)
    assert admin.describe_consumer_groups(["g"])["g"].result(10).members and admin.restarts == 0


def test_settings_that_differ_only_in_a_secret_get_their_own_child() -> None:
    def sasl(password: str) -> KafkaSettings:
        return KafkaSettings(bootstrap="b:9092", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_username="reach", sasl_password=password)

    one, two = groupadmin.shared(sasl("one")), groupadmin.shared(sasl("two"))
    assert one is not two and one is groupadmin.shared(sasl("one"))


class FakeAdmin:
    """confluent-kafka's results for group `g`; a timeout for `slow`; a broker error for anything else."""

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
        member = SimpleNamespace(client_id="c1", assignment=SimpleNamespace(topic_partitions=[TopicPartition("t", 3)]))
        return {groups[0]: self._future(groups[0], SimpleNamespace(state=SimpleNamespace(name="STABLE"),
                                                                   members=[member]))}

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float) -> dict[str, Any]:
        group = requests[0].group_id
        return {group: self._future(group, SimpleNamespace(topic_partitions=[TopicPartition("t", 3, 7)]))}

    @staticmethod
    def _future(group: str, value: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if group == "g":
            future.set_result(value)
        elif group != "slow":
            future.set_exception(RuntimeError("GROUP_AUTHORIZATION_FAILED"))
        return future


def test_the_child_answers_each_request_by_id() -> None:
    requests = [{"id": 1, "op": "describe", "group": "g", "timeout": 1},
                {"id": 2, "op": "offsets", "group": "g", "timeout": 1},
                {"id": 3, "op": "describe", "group": "denied", "timeout": 1},
                {"id": 4, "op": "describe", "group": "slow", "timeout": 0.05},
                {"id": 5, "op": "drop", "group": "g", "timeout": 1}]
    stdin = io.StringIO("\n".join(json.dumps(r) for r in [settings_payload(KafkaSettings(bootstrap="b:1")),
                                                           *requests]) + "\n")
    stdout = io.StringIO()
    child_main(stdin, stdout, make_admin=lambda _kafka: FakeAdmin())
    answers = {a["id"]: a for a in map(json.loads, stdout.getvalue().splitlines())}
    assert answers[1]["ok"] == {"group_id": "g", "state": "STABLE",
                                "members": [{"client_id": "c1", "partitions": [["t", 3]]}]}
    assert answers[2]["ok"] == {"group_id": "g", "offsets": [["t", 3, 7]]}
    assert "GROUP_AUTHORIZATION_FAILED" in answers[3]["error"]
    assert "within 0.05s" in answers[4]["error"]
    assert "unknown request 'drop'" in answers[5]["error"]


def test_secrets_reach_the_child_on_stdin_only() -> None:
    kafka = KafkaSettings(bootstrap="b:1", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_username="u", sasl_password="s3cret")
    payload = settings_payload(kafka)
    assert payload["sasl_password"] == "s3cret"
    assert KafkaSettings.model_validate(payload).sasl_password == kafka.sasl_password


def test_the_real_child_answers_with_the_broker_s_error_and_exits_when_its_parent_closes_it() -> None:
    real = GroupAdmin(KafkaSettings(bootstrap="127.0.0.1:1"))  # nothing listens there
    try:
        with pytest.raises(GroupAdminError):
            real.describe_consumer_groups(["g"], request_timeout=0.5)["g"].result(30)
        child = real._child
        assert child is not None
    finally:
        real.close()
    assert child.proc.returncode == 0, "it ended on its own when its stdin closed, not by a kill"
