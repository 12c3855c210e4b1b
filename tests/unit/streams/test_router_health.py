"""The router's use of health, canaries and qps_limit, on in-memory fakes: the records a batch produces."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reach.envelopes import now_ms
from reach.kafka import codec
from reach.records import BreakerState, ControlKind, Envelope, ErrorInfo, InstanceHealth, Status
from reach.streams.canary.controller import canary_record
from tests.unit.routing_fixtures import canary
from tests.unit.streams.kafka_fakes import FakeProducer, settle
from tests.unit.streams.test_router import INBOX, receipts, record, router


def sick(**kw: Any) -> InstanceHealth:
    return InstanceHealth(instance_id="i1", agent_id="agent://demo/echo", at=now_ms(), **kw)


def test_every_candidate_open_fails_fast_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r.state.apply_health("i1", sick(breaker=BreakerState.OPEN, open_until=now_ms() + 20_000))
    producer = FakeProducer()
    acks = settle(r, cast(Any, [record(0)]), cast(Any, producer))
    [receipt] = receipts(producer)
    assert receipt.status is Status.FAILED and 10_000 < (receipt.retry_after_ms or 0) <= 20_000
    assert isinstance(receipt.error, ErrorInfo) and (receipt.error.kind, receipt.error.code) == ("UNAVAILABLE",) * 2
    assert producer.to(INBOX) == [] and acks.commits() == {(record(0).topic(), 0): 1}


def test_a_slow_sole_candidate_gets_the_envelope_with_a_longer_execution_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r.state.apply_health("i1", sick(weight=0.0, timeout_factor=2.0))
    producer = FakeProducer()
    msg = record(0, execution_timeout_ms=1_500)
    settle(r, cast(Any, [msg]), cast(Any, producer))
    [forwarded] = [codec.decode(v, Envelope) for v in producer.to(INBOX)]
    original = codec.decode(cast(bytes, msg.value()), Envelope)
    assert forwarded.execution_timeout_ms == 3_000
    assert forwarded.model_copy(update={"execution_timeout_ms": 1_500}) == original, "only the timeout changed"


def test_a_healthy_forward_keeps_the_original_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    r.state.apply_health("i1", sick())
    producer = FakeProducer()
    msg = record(0)
    settle(r, cast(Any, [msg]), cast(Any, producer))
    assert producer.to(INBOX) == [msg.value()]


def test_the_routed_receipt_records_the_canary_arm(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    control = canary_record(canary("1", agent_id="agent://demo/echo", steps=[100]), by="test")
    assert control.kind is ControlKind.CANARY
    r.state.control.apply(control.key, control)
    producer = FakeProducer()
    settle(r, cast(Any, [record(0)]), cast(Any, producer))
    [routed] = receipts(producer)
    assert routed.status is Status.ROUTED and routed.decision is not None and routed.decision.arm == "canary"


def test_over_its_qps_limit_the_only_instance_overloads(monkeypatch: pytest.MonkeyPatch) -> None:
    r = router(monkeypatch)
    reg = r.state.registration("i1")
    assert reg is not None
    r.state.apply_registration("i1", reg.model_copy(update={"qps_limit": 2.0}))
    producer = FakeProducer()
    settle(r, cast(Any, [record(n) for n in range(5)]), cast(Any, producer))
    statuses = [x.status for x in receipts(producer)]
    assert statuses.count(Status.ROUTED) == 2 and statuses.count(Status.FAILED) == 3
    failed = [x for x in receipts(producer) if x.status is Status.FAILED]
    assert all(x.error is not None and x.error.code == "OVERLOAD" and (x.retry_after_ms or 0) > 0 for x in failed)
