"""The router's state loop folds each record on its own: a bad one is counted and skipped, never fatal."""

from __future__ import annotations

import pytest

from reach.control import DEFAULT_WEIGHTS, instance_record
from reach.core.loads import InstanceLoad
from reach.kafka.codec import encode, encode_dict
from reach.names import Names
from reach.records import (
    AgentRegistration,
    AgentState,
    Capability,
    Control,
    ControlKind,
    InstanceAction,
    LoadReport,
    Receipt,
    Status,
    Weights,
)
from reach.settings import KafkaSettings
from reach.streams.router.state import RouterState, StateLoop

NAMES = Names("ns")


def loop() -> tuple[RouterState, StateLoop]:
    state = RouterState()
    return state, StateLoop(state=state, names=NAMES, kafka=KafkaSettings())


def registration(instance_id: str, inbox: str) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id=instance_id, build_version="1",
                             capabilities=[Capability(name="x.y", version="1.0.0")], state=AgentState.READY,
                             heartbeat_at=1_000, ttl_ms=60_000, max_concurrency=4, assigned_partitions=[0],
                             inbox_topic=inbox)


def test_bad_control_records_are_skipped_and_the_next_good_one_applies() -> None:
    state, fold = loop()
    null_weights = encode_dict("Control", {"kind": "WEIGHTS", "scope": "*", "weights": None, "instance": None,
                                           "policy": None, "updated_at": 1, "updated_by": "t"})
    fold._dispatch(NAMES.control, b"WEIGHTS:*", null_weights)
    fold._dispatch(NAMES.control, b"\xff\xfeWEIGHTS:*", b"\xc3\x01garbage")
    nan = Control(kind=ControlKind.WEIGHTS, scope="*", weights=Weights(load=float("nan")), updated_at=1,
                  updated_by="t")
    fold._dispatch(NAMES.control, b"WEIGHTS:*", encode(nan))
    assert fold.bad_records == 3
    good = Control(kind=ControlKind.WEIGHTS, scope="*", weights=Weights(fit=0.9), updated_at=2, updated_by="t")
    fold._dispatch(NAMES.control, b"WEIGHTS:*", encode(good))
    assert state.control.weights("x.y")["fit"] == 0.9 and fold.bad_records == 3


def test_bad_registry_records_are_skipped_and_a_foreign_inbox_is_never_routed_to() -> None:
    state, fold = loop()
    fold._dispatch(NAMES.registry, b"\xff\xfe", b"junk")
    fold._dispatch(NAMES.registry, b"i1", encode(registration("i1", NAMES.inbox("agent://a/b"))))
    assert [r.instance_id for r in state.live(2_000)] == ["i1"]
    fold._dispatch(NAMES.registry, b"i1", encode(registration("i1", "ns.control")))
    assert state.live(2_000) == [], "an instance claiming another topic as its inbox is dropped"
    assert fold.bad_records == 2


def test_a_valid_control_under_a_key_that_is_not_utf8_is_skipped_and_counted() -> None:
    state, fold = loop()
    disable = instance_record("i1", InstanceAction.DISABLE)
    weights = Control(kind=ControlKind.WEIGHTS, scope="*", weights=Weights(fit=0.9), updated_at=2, updated_by="t")
    fold._dispatch(NAMES.control, b"\xff\xfe" + disable.key.encode(), encode(disable))
    fold._dispatch(NAMES.control, b"\xff\xfeWEIGHTS:*", encode(weights))
    assert state.control.disabled() == frozenset() and state.control.weights("x.y") == DEFAULT_WEIGHTS
    assert fold.bad_records == 2
    fold._dispatch(NAMES.control, disable.key.encode(), encode(disable))
    assert state.control.disabled() == {"i1"} and fold.bad_records == 2, "the same record under its own key applies"


def test_a_registration_whose_key_is_not_its_instance_id_is_never_routed_to() -> None:
    state, fold = loop()
    inbox = NAMES.inbox("agent://a/b")
    fold._dispatch(NAMES.registry, b"\xff\xfei1", encode(registration("i1", inbox)))
    assert state.live(2_000) == [] and fold.bad_records == 1, "its own tombstone (key i1) could never remove it"
    fold._dispatch(NAMES.registry, b"i2", encode(registration("i1", inbox)))
    assert state.live(2_000) == [] and fold.bad_records == 2
    fold._dispatch(NAMES.registry, b"i1", encode(registration("i1", inbox)))
    assert [r.instance_id for r in state.live(2_000)] == ["i1"] and fold.bad_records == 2


def test_an_undecodable_receipt_is_counted() -> None:
    _, fold = loop()
    fold._dispatch(NAMES.receipts, b"m", b"\x00\x00")
    assert fold.bad_records == 1


def test_a_registry_outage_is_not_a_bad_record(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.kafka.codec import RegistryUnavailable
    from reach.streams import feed as module

    def down(_value: bytes, _model: object) -> object:
        raise RegistryUnavailable("the registry did not answer")

    monkeypatch.setattr(module, "decode", down)  # the feed decodes each record once, for every view
    _, fold = loop()
    for topic in (NAMES.registry, NAMES.control):
        with pytest.raises(RegistryUnavailable):
            fold._dispatch(topic, b"k", b"\x00\x00\x00\x00\x01")
    assert fold.bad_records == 0, "the loop restarts and reads again; nothing is skipped"


def test_load_reports_and_receipts_feed_the_load_view_and_a_bad_report_is_counted() -> None:
    state, fold = loop()
    reg = registration("i1", NAMES.inbox("agent://a/b")).model_copy(update={"max_queue": 16})
    fold._dispatch(NAMES.registry, b"i1", encode(reg))
    report = LoadReport(instance_id="i1", agent_id="agent://a/b", at=2_000, inflight=1, queued=0, capacity=4,
                        max_queue=12, drain_rate=8.0)
    fold._dispatch(NAMES.loads, b"i1", encode(report))
    fold._dispatch(NAMES.loads, b"i1", b"\xc3\x01garbage")
    assert fold.bad_records == 1

    def receipt(message_id: str, status: Status, at: int) -> bytes:
        return encode(Receipt(message_id=message_id, trace_id="t", tenant="d", capability="x.y", status=status,
                              at=at, agent_id="agent://a/b", instance_id="i1"))

    fold._dispatch(NAMES.receipts, b"m1", receipt("m1", Status.ROUTED, 2_100))
    fold._dispatch(NAMES.receipts, b"m2", receipt("m2", Status.ROUTED, 2_100))
    fold._dispatch(NAMES.receipts, b"m2", receipt("m2", Status.STARTED, 2_200))
    assert state.loads.view([reg])["i1"] == InstanceLoad(2, 1, 4, 12, 8.0), "1 reported + m2 running, m1 queued"
    fold._dispatch(NAMES.receipts, b"m2", receipt("m2", Status.COMPLETED, 2_300))
    assert state.loads.view([reg])["i1"] == InstanceLoad(1, 1, 4, 12, 8.0)
    fold._dispatch(NAMES.registry, b"i1", None)
    assert state.loads.view([reg])["i1"] == InstanceLoad.of(reg), "a tombstone forgets the instance"


def test_health_records_fold_into_router_state_health_and_bad_ones_are_skipped() -> None:
    from reach.records import BreakerState, InstanceHealth

    state, fold = loop()
    opened = InstanceHealth(instance_id="i-1", agent_id="agent://a/b", at=5, breaker=BreakerState.OPEN,
                            open_until=100, admit=0.0)
    fold._dispatch(NAMES.health, b"i-1", encode(opened))
    assert state.health["i-1"] == opened
    fold._dispatch(NAMES.health, b"i-2", encode(opened))  # the key must be the record's instance
    fold._dispatch(NAMES.health, b"i-3", b"\xc3\x01garbage")
    assert fold.bad_records == 2 and set(state.health) == {"i-1"}
    fold._dispatch(NAMES.health, b"i-1", None)  # a tombstone: the instance is healthy by default again
    assert dict(state.health) == {}


def test_session_records_recover_affinity_bad_ones_are_skipped_and_a_tombstone_forgets() -> None:
    import time

    from reach.core.sessionmap import encode as session

    state, fold = loop()
    now = int(time.time() * 1000)
    fold._dispatch(NAMES.sessions, b"t/s-1", session("i-1", now - 1_000, "t"))
    fold._dispatch(NAMES.sessions, b"t/s-2", b"not a session")
    fold._dispatch(NAMES.sessions, b"t/s-3", session("i-3", now - 3_600_000, "t"))  # idle past the TTL: not recovered
    assert fold.bad_records == 1
    assert state.sessions.get("t/s-1", now) == "i-1" and state.sessions.get("t/s-3", now) is None
    fold._dispatch(NAMES.sessions, b"t/s-1", None)
    assert state.sessions.get("t/s-1", now) is None


def test_a_session_record_of_another_tenant_or_from_before_tenants_is_not_learned() -> None:
    """Security finding (session affinity across tenants): a record is learned only under its own tenant's key; one
    written before sessions were scoped (a bare key, no tenant in its value) is read without error and skipped."""
    import time

    from reach.core.sessionmap import encode as session

    state, fold = loop()
    now = int(time.time() * 1000)
    fold._dispatch(NAMES.sessions, b"s-1", session("i-1", now - 1_000))  # the record of an older router
    fold._dispatch(NAMES.sessions, b"acme/s-2", session("i-2", now - 1_000, "evil"))
    fold._dispatch(NAMES.sessions, b"a%2Fb/s-3", session("i-3", now - 1_000, "a/b"))
    assert fold.bad_records == 0 and len(state.sessions) == 1
    assert state.sessions.get("a%2Fb/s-3", now) == "i-3"
