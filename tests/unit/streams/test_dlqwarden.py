"""The dead-letter warden's batches on in-memory fakes (reach.kafka.worker's `process` seam): a letter is held until
its POLICY makes it DEAD, then its owner is told once through the owner's channel; a replayed letter, or one
whose agent names no owner, tells nobody and is committed."""

from __future__ import annotations

import json
from typing import Any, cast

from reach import dlq
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.names import Names
from reach.records import App, Envelope, ErrorInfo, Policy
from reach.settings import KafkaSettings
from reach.streams.dlqwarden import DeadLetterWarden
from tests.unit.routing_fixtures import reg
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer

NAMES = Names("ns")
DAY = 24 * 3600 * 1000
FAILED_AT = 1_000_000
EMAIL = NAMES.capability("channel.email")


def letter_at(offset: int, *, agent_id: str = "agent://echo/main", failed_at: int = FAILED_AT,
              source: str = "reach-client") -> FakeMessage:
    envelope = new_envelope("text.echo", {"n": offset}, source=source).model_copy(
        update={"message_id": f"m{offset}"})
    value, hdrs = dlq.letter(codec.encode(envelope), reason=dlq.RETRIES_EXHAUSTED, origin=("ns.cap.text.echo", 0, 9),
                             error=ErrorInfo(kind="TRANSIENT", code="BOOM", message="boom"), envelope=envelope,
                             agent_id=agent_id, first_failure_at=failed_at)
    decoded = codec.decode(value, dlq.DeadLetter)
    value = codec.encode(decoded.model_copy(update={"last_failure_at": failed_at}))
    return FakeMessage(NAMES.dlq, 0, offset, value, envelope.message_id.encode(), hdrs)  # type: ignore[arg-type]


def warden(now: int, *, ledger: set[str] | None = None, owner: str | None = "email:ops@example.com",
           policy: Policy | None = None, apps: dict[str, App] | None = None) -> DeadLetterWarden:
    owned = reg("i1").model_copy(update={"owner": owner})
    return DeadLetterWarden(names=NAMES, kafka=KafkaSettings(), policy=lambda _cap: policy or Policy(),
                            registrations=lambda: [owned], apps=lambda: apps or {}, ledger=lambda: ledger or set(),
                            clock=lambda: now)


def app(app_id: str, owner: str | None, *, tenant: str = "default", capabilities: list[str] | None = None,
        revoked: bool = False) -> App:
    return App(app_id=app_id, name=app_id, tenant=tenant, capabilities=capabilities or [], rate=1, burst=1,
               created_at=0, updated_at=0, updated_by="t", owner=owner, revoked_at=1 if revoked else None)


def run(w: DeadLetterWarden, batch: list[FakeMessage]) -> tuple[FakeProducer, FakeConsumer, dict[Any, int]]:
    producer, consumer = FakeProducer(), FakeConsumer()
    commits = w.process(cast(Any, batch), consumer=cast(Any, consumer), producer=cast(Any, producer))
    return producer, consumer, commits


def test_a_letter_younger_than_seven_days_is_held_and_nobody_is_told() -> None:
    producer, consumer, commits = run(warden(FAILED_AT + 7 * DAY - 1), [letter_at(0)])
    assert commits == {} and producer.to(EMAIL) == []
    assert [(s.partition, s.offset) for s in consumer.seeks] == [(0, 0)], "read again when it may be DEAD"


def test_a_dead_letter_tells_its_agents_owner_once_through_the_owners_channel() -> None:
    w = warden(FAILED_AT + 7 * DAY)
    producer, _, commits = run(w, [letter_at(0), letter_at(1)])
    assert commits == {(NAMES.dlq, 0): 2}
    notices = [codec.decode(v, Envelope) for v in producer.to(EMAIL)]
    assert len(notices) == 2 and (w.dead, w.told) == (2, 2)
    payload = json.loads(notices[0].payload)
    assert payload["endpoint"] == "ops@example.com" and payload["body"]["kind"] == "dead_letter"
    assert payload["body"]["redrive"] == "reach dlq replay --id 0:0"
    assert payload["body"]["reason"] == "RETRIES_EXHAUSTED"
    again, _, _ = run(warden(FAILED_AT + 7 * DAY), [letter_at(0)])
    assert codec.decode(again.to(EMAIL)[0], Envelope).message_id == notices[0].message_id, \
        "read again after a restart: the same notice id, one message to the channel's idempotency"


def test_the_policy_sets_the_age_and_a_replayed_letter_is_not_dead() -> None:
    hour = Policy(dead_after_ms=3600 * 1000)
    producer, _, commits = run(warden(FAILED_AT + 3600 * 1000, policy=hour), [letter_at(0)])
    assert len(producer.to(EMAIL)) == 1 and commits == {(NAMES.dlq, 0): 1}
    item = dlq.parse(0, 0, 0, letter_at(0).value())
    assert item is not None
    replayed = {dlq.ledger_key(item.message_id or "", 0)}
    producer, _, commits = run(warden(FAILED_AT + 8 * DAY, ledger=replayed), [letter_at(0)])
    assert producer.to(EMAIL) == [] and commits == {(NAMES.dlq, 0): 1}


def test_a_letter_whose_agent_names_no_owner_is_counted_and_committed() -> None:
    w = warden(FAILED_AT + 8 * DAY, owner=None)
    producer, _, commits = run(w, [letter_at(0)])
    assert producer.to(EMAIL) == [] and commits == {(NAMES.dlq, 0): 1} and w.unowned == 1


def test_a_letter_no_agent_owns_goes_to_the_owner_of_the_gateway_app_that_sent_it() -> None:
    """A NO_ROUTE letter (no agent ever had it; here an agent with no owner): the sending app's owner is told. Only
    the gateway's stamp `gateway:<app_id>` names an app; a client's own source names none."""
    apps = {"app_shop": app("app_shop", "email:shop@example.com")}
    w = warden(FAILED_AT + 8 * DAY, owner=None, apps=apps)
    producer, _, _ = run(w, [letter_at(0, agent_id="", source="gateway:app_shop"),
                             letter_at(1, agent_id="", source="app_shop")])
    [notice] = [codec.decode(v, Envelope) for v in producer.to(EMAIL)]
    assert json.loads(notice.payload)["endpoint"] == "shop@example.com" and (w.told, w.unowned) == (1, 1)
    owned, _, _ = run(warden(FAILED_AT + 8 * DAY, apps=apps), [letter_at(2, source="gateway:app_shop")])
    assert json.loads(codec.decode(owned.to(EMAIL)[0], Envelope).payload)["endpoint"] == "ops@example.com", \
        "the agent's owner comes first"


def test_a_stale_no_route_capability_names_the_owners_of_the_apps_that_may_call_it() -> None:
    apps = [app("a1", "email:a@example.com"), app("a2", "email:b@example.com", capabilities=["other.cap"]),
            app("a3", "email:c@example.com", tenant="rival"), app("a4", "email:d@example.com", revoked=True),
            app("a5", None), app("a6", "email:a@example.com", capabilities=["text.echo"])]
    assert dlq.app_owners(apps, capability="text.echo", tenants={"default"}) == ["email:a@example.com"]
    assert dlq.app_owners(apps, capability="text.echo", tenants={"default", "rival"}) == [
        "email:a@example.com", "email:c@example.com"]
    assert dlq.app_owners(apps, capability="other.cap", tenants={"default"}) == [
        "email:a@example.com", "email:b@example.com"]
