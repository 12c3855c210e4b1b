"""Issue 28 finding 5: no caller wears down an intent mapping. Only endings the mapped agent caused count, what is
learned is the failing tenant's own record in its own key space, and the operator's mapping stays global."""

from __future__ import annotations

from typing import Any

import pytest

from reach.envelopes import new_envelope, now_ms
from reach.intent import mappings
from reach.intent.catalog import RESERVED
from reach.intent.feedback import Feedback, blame
from reach.intent.stages import Mapping_
from reach.kafka import codec
from reach.kafka import headers as H
from reach.records import Control, ControlKind, ErrorInfo, Receipt, Status
from reach.streams.resolver.resolve_loop import Resolver
from tests.unit.intent.test_resolver_unit import _registration, _settings
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer

BUDGET = ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED", message="the total budget ended")
TIMEOUT = ErrorInfo(kind="TIMEOUT", code="EXECUTION_TIMEOUT", message="the run took longer than 5 ms")
BUSINESS = ErrorInfo(kind="BUSINESS", code="ASKED_TO_FAIL", message="no")


@pytest.mark.parametrize(("status", "error", "caller_timeout", "who"), [
    (Status.COMPLETED, None, False, "success"),
    (Status.EXPIRED, None, False, "caller"),  # the budget ran out: budget_ms 1 is the caller's choice
    (Status.CANCELED, None, False, "caller"),
    (Status.REJECTED, None, False, "caller"),
    (Status.UNROUTABLE, None, False, "caller"),
    (Status.DEAD_LETTERED, BUDGET, False, "caller"),
    (Status.DEAD_LETTERED, TIMEOUT, True, "caller"),  # the caller's own execution timeout cut the run
    (Status.DEAD_LETTERED, TIMEOUT, False, "agent"),  # the agent's declared timeout: the agent's
    (Status.FAILED, BUSINESS, False, "agent"),
    (Status.FAILED, None, True, "agent"),
    (Status.ROUTED, None, False, None),
])
def test_blame_counts_only_what_the_agent_did(status: Status, error: ErrorInfo | None, caller_timeout: bool,
                                              who: str | None) -> None:
    assert blame(status, error, caller_timeout=caller_timeout) == who


def test_expired_and_canceled_endings_never_lower_a_mapping_nor_reset_a_run() -> None:
    fb = Feedback(failures=3, step=0.25)
    for i in range(30):  # the attack: requests bound to expire
        fb.sent(f"e{i}", "rain", "weather.forecast", 1.0, tenant="mallory")
        assert fb.ended(f"e{i}", Status.EXPIRED, BUDGET) is None
    fb.sent("f0", "rain", "weather.forecast", 1.0, tenant="acme")
    fb.sent("f1", "rain", "weather.forecast", 1.0, tenant="acme")
    fb.sent("c0", "rain", "weather.forecast", 1.0, tenant="acme")
    fb.sent("f2", "rain", "weather.forecast", 1.0, tenant="acme")
    assert fb.ended("f0", Status.FAILED, BUSINESS) is None
    assert fb.ended("f1", Status.FAILED, BUSINESS) is None
    assert fb.ended("c0", Status.CANCELED) is None  # neither counts nor resets the run
    lowered = fb.ended("f2", Status.FAILED, BUSINESS)
    assert lowered is not None and (lowered.tenant, lowered.phrase, lowered.confidence) == ("acme", "rain", 0.75)


def test_runs_are_per_tenant() -> None:
    fb = Feedback(failures=2, step=0.25)
    fb.sent("a0", "rain", "weather.forecast", 1.0, tenant="a")
    fb.sent("b0", "rain", "weather.forecast", 1.0, tenant="b")
    assert fb.ended("a0", Status.FAILED, BUSINESS) is None
    assert fb.ended("b0", Status.FAILED, BUSINESS) is None  # one failure each: no tenant has a run of two
    fb.sent("b1", "rain", "weather.forecast", 1.0, tenant="b")
    lowered = fb.ended("b1", Status.DEAD_LETTERED, BUSINESS)
    assert lowered is not None and lowered.tenant == "b"


def test_runs_are_bounded() -> None:
    fb = Feedback(failures=2, tracked=3)
    for i in range(10):
        fb.sent(f"m{i}", f"phrase {i}", "weather.forecast", 1.0, tenant="t")
        fb.ended(f"m{i}", Status.FAILED, BUSINESS)
    assert len(fb._runs) == 3


def test_a_feedback_record_has_its_own_key_and_never_replaces_the_operators() -> None:
    operator = mappings.record("Rain soon?", "weather.forecast")
    learned = mappings.feedback_record("acme", "rain soon", "weather.forecast", confidence=0.25, by="resolver-r")
    assert operator.key == "INTENT:rain soon" and learned.key == "INTENT_FEEDBACK:acme:rain soon"
    assert learned.intent is not None and learned.intent.tenant == "acme" and learned.intent.source == "feedback"
    assert codec.decode(codec.encode(learned), Control) == learned
    records = {operator.key: operator, learned.key: learned}
    assert mappings.exact_map({}, records) == {"rain soon": Mapping_("weather.forecast", 1.0)}
    # tenants whose names would make two keys alike keep apart
    assert mappings.feedback_record("a:b", "c", "x.y", confidence=0.5, by="r").key != \
        mappings.feedback_record("a", "b:c", "x.y", confidence=0.5, by="r").key
    assert mappings.feedback_keys("RAIN SOON", records) == [learned.key]


def test_a_learned_confidence_holds_while_its_mapping_stands() -> None:
    learned = mappings.feedback_record("acme", "rain soon", "weather.forecast", confidence=0.25, by="r")
    other = mappings.feedback_record("beta", "rain soon", "text.translate", confidence=0.25, by="r")
    records: dict[str, Control] = {learned.key: learned, other.key: other}
    exact = mappings.exact_map({"rain soon": "weather.forecast"}, records)
    assert mappings.learned_map(exact, records) == {"acme": {"rain soon": Mapping_("weather.forecast", 0.25)}}
    reset = mappings.record("rain soon", "weather.forecast").model_copy(
        update={"updated_at": learned.updated_at + 1})  # the operator sets the phrase again: restored for all
    records[reset.key] = reset
    assert mappings.learned_map(mappings.exact_map({}, records), records) == {}


def test_a_global_feedback_record_from_an_older_resolver_is_not_the_operators_word() -> None:
    legacy = mappings.record("rain soon", "weather.forecast", confidence=0.25, source="feedback", by="resolver-old")
    assert mappings.exact_map({"rain soon": "weather.forecast"}, {legacy.key: legacy}) == \
        {"rain soon": Mapping_("weather.forecast", 1.0)}


def test_an_old_reader_skips_a_feedback_record() -> None:
    """A resolver from before Control v6 reads INTENT_FEEDBACK as UNKNOWN and skips it: never a global mapping."""
    import json
    from io import BytesIO

    import fastavro

    from tests.unit.kafka.test_codec import SCHEMA_ROOT

    learned = mappings.feedback_record("acme", "rain soon", "weather.forecast", confidence=0.25, by="r")
    writer = fastavro.parse_schema(json.loads((SCHEMA_ROOT / "Control.avsc").read_text()), named_schemas={})
    v5 = fastavro.parse_schema(json.loads((SCHEMA_ROOT / "history" / "Control" / "5.avsc").read_text()),
                               named_schemas={})
    buf = BytesIO()
    fastavro.schemaless_writer(buf, writer, learned.model_dump(mode="json"))
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, writer, v5)["kind"] == ControlKind.UNKNOWN


# --- the attack through the resolver's own loop (in-memory state, fake producer) ---------------------------------

def _receipt(message_id: str, status: Status, error: ErrorInfo | None = None) -> Receipt:
    return Receipt(message_id=message_id, trace_id="t", tenant="t", capability="weather.forecast", status=status,
                   at=now_ms(), error=error)


def _feed(worker: Resolver, tenant: str, endings: list[tuple[Status, ErrorInfo | None]], **fields: Any) -> None:
    """Requests of `tenant` for the mapped phrase through the resolver's batch, then their endings on its outcomes
    path; whatever it writes to the control topic is applied to its own view (as its state loop would)."""
    topic, producer = worker.names.intents, FakeProducer()
    envelopes = [new_envelope(RESERVED, {}, intent="rain soon", tenant=tenant, **fields) for _ in endings]
    worker._batch(FakeConsumer(), producer, [  # type: ignore[arg-type]
        FakeMessage(topic, 0, n, codec.encode(e)) for n, e in enumerate(envelopes)])
    assert len(producer.to(worker.names.capability("weather.forecast"))) == len(envelopes)  # all resolved exactly
    worker._outcomes(producer, [  # type: ignore[arg-type]
        FakeMessage(worker.names.receipts, 0, n, codec.encode(_receipt(e.message_id, status, error)),
                    _headers=[(H.MESSAGE_ID, e.message_id.encode())])
        for n, (e, (status, error)) in enumerate(zip(envelopes, endings, strict=True))])
    producer.flush()
    for value in producer.to(worker.names.control):
        record = codec.decode(value, Control)
        worker.state.control.apply(record.key, record)
    worker.refresh(now_ms())


def _mapped_worker() -> Resolver:
    worker = Resolver(**_settings())
    worker.unavailable = "no model in this test"
    worker.state.apply_registration("i-1", _registration("weather.forecast", "text.translate"))
    operator = mappings.record("rain soon", "weather.forecast")
    worker.state.control.apply(operator.key, operator)
    worker.refresh(now_ms())
    return worker


def test_budget_1_ms_requests_do_not_wear_down_the_operators_mapping() -> None:
    worker = _mapped_worker()
    _feed(worker, "mallory", [(Status.EXPIRED, BUDGET)] * 12, budget_ms=1)
    _feed(worker, "mallory", [(Status.DEAD_LETTERED, TIMEOUT)] * 6, execution_timeout_ms=1)
    _feed(worker, "mallory", [(Status.CANCELED, None)] * 6)
    records = worker.state.control.records()
    assert [k for k, c in records.items() if c.kind is not ControlKind.INTENT] == []  # nothing learned
    assert records["INTENT:rain soon"].intent == mappings.record("rain soon", "weather.forecast").intent
    for tenant in ("mallory", "acme"):
        res = worker.resolve("rain soon", tenant)
        assert (res.stage, res.capability, res.candidates[0].score) == ("exact", "weather.forecast", 1.0)


def test_one_tenants_failures_lower_its_own_confidence_only() -> None:
    worker = _mapped_worker()
    for _ in range(2):  # two runs of three, each resolved with the confidence learned so far: 1.0 -> 0.75 -> 0.5
        _feed(worker, "mallory", [(Status.FAILED, BUSINESS)] * 3)
    records = worker.state.control.records()
    learned = records["INTENT_FEEDBACK:mallory:rain soon"]
    assert learned.intent is not None and (learned.intent.tenant, learned.intent.confidence) == ("mallory", 0.5)
    assert records["INTENT:rain soon"].intent == mappings.record("rain soon", "weather.forecast").intent
    _feed(worker, "mallory", [(Status.FAILED, BUSINESS)] * 3)  # 0.25: below the floor, for mallory alone
    assert worker.resolve("rain soon", "mallory").stage == "handoff"  # (no model here: past exact, a human)
    acme = worker.resolve("rain soon", "acme")
    assert (acme.stage, acme.capability, acme.candidates[0].score) == ("exact", "weather.forecast", 1.0)
    again = mappings.record("rain soon", "weather.forecast").model_copy(update={"updated_at": now_ms() + 1})
    worker.state.control.apply(again.key, again)  # the operator sets it again: restored for mallory too
    worker.refresh(now_ms())
    assert worker.resolve("rain soon", "mallory").stage == "exact"
