"""The poison suite: every kind of bad record fed to a running stream app (router, delay tiers, state loop) on
the real broker. What a user sees: a REJECTED receipt or a dead letter with its reason, the worker still
healthy, and the next good message COMPLETED."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from reach import dlq
from reach.control import instance_record
from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec, headers
from reach.names import Names
from reach.records import Control, ControlKind, DeadLetter, InstanceAction, Receipt, Status, Weights
from reach.settings import KafkaSettings
from tests.integration.router_helpers import (
    Instance,
    Sender,
    Tail,
    Worker,
    dlq_tail,
    ensure,
    produce,
    receipts_tail,
    wait_for,
)
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration
CAPABILITY = "demo.echo"


@pytest.fixture
def echo(namespace: str) -> Iterator[Instance]:
    """A simulated echo instance whose worker answers STARTED + COMPLETED."""
    instance = Instance(Names(namespace), "echo-1", agent_id="agent://demo/echo", capability=CAPABILITY,
                        version="1.0.0", partitions=list(range(8)))
    instance.heartbeat()
    worker = Worker(instance)
    yield instance
    worker.stop()


def status_of(app: StreamApp, message_id: str) -> str | None:
    row = app.get(f"/messages/{message_id}")
    return row.get("status") if "_status" not in row else None


def good_message_completes(app: StreamApp, sender: Sender) -> None:
    """The worker is healthy and the next good message ends COMPLETED."""
    assert app.get("/healthz")["ok"] is True, app.log_tail()
    mid = sender.send(new_envelope(CAPABILITY, {"good": now_ms()}))
    sender.flush()
    wait_for(lambda: status_of(app, mid) == "COMPLETED", 60, f"{mid} COMPLETED")


def letter_for(tail: Tail, reason: str, **match: Any) -> DeadLetter:
    def found() -> DeadLetter | None:
        return next((d for d in tail.poll() if d.reason == reason
                     and all(getattr(d, k) == v for k, v in match.items())), None)
    return wait_for(found, 60, f"a {reason} dead letter")


def rejected(tail: Tail, message_id: str) -> Receipt:
    def found() -> Receipt | None:
        return next((r for r in tail.poll() if r.message_id == message_id and r.status is Status.REJECTED), None)
    return wait_for(found, 60, f"REJECTED for {message_id}")


def test_poison_on_a_capability_topic(namespace: str, stream_app: StreamApp, echo: Instance) -> None:
    names = Names(namespace)
    sender = Sender(names)
    wait_for(lambda: any(a["instance_id"] == "echo-1" for a in stream_app.get("/agents")), 30, "echo seen")
    good_message_completes(stream_app, sender)
    receipts, letters = receipts_tail(names), dlq_tail(names)

    # ~1 MB (incompressible): REJECTED, and its dead letter keeps every byte although it is over the
    # producer's default message.max.bytes (the loop used to restart on it forever)
    huge = new_envelope(CAPABILITY, os.urandom(1_030_000), max_payload_bytes=2_000_000)
    raw = codec.encode(huge)
    big = Producer(KafkaSettings().producer(**{"message.max.bytes": 1_100_000, "compression.type": "none"}))
    big.produce(names.capability(CAPABILITY), raw, key=huge.message_id.encode())
    assert big.flush(30) == 0
    assert rejected(receipts, huge.message_id).error.code == "OVERSIZE"  # type: ignore[union-attr]
    assert letter_for(letters, "OVERSIZE", message_id=huge.message_id).envelope == raw

    # bytes that are not an envelope
    sender.raw(names.capability(CAPABILITY), "junk-key", b"\x00\x01 not avro")
    sender.flush()
    assert letter_for(letters, dlq.UNDECODABLE).envelope == b"\x00\x01 not avro"
    assert rejected(receipts, "junk-key").error.code == "UNDECODABLE"  # type: ignore[union-attr]

    # a reply_to that would make the stream app write into its own control topic
    sneaky = new_envelope(CAPABILITY, {"x": 1}, reply_to=names.control)
    sender.send(sneaky)
    sender.flush()
    assert rejected(receipts, sneaky.message_id).error.code == "BAD_REPLY_TO"  # type: ignore[union-attr]

    good_message_completes(stream_app, sender)
    control = Tail(names.control)
    assert control.poll() == [], "nothing was written into the control topic"
    for tail in (receipts, letters, control):
        tail.close()


def test_poison_on_the_control_and_registry_topics(namespace: str, stream_app: StreamApp, echo: Instance) -> None:
    names = Names(namespace)
    sender = Sender(names)
    wait_for(lambda: any(a["instance_id"] == "echo-1" for a in stream_app.get("/agents")), 30, "echo seen")
    # valid Avro the model refuses (WEIGHTS without weights), a key that is not UTF-8, NaN weights
    null_weights = codec.encode_dict("Control", {"kind": "WEIGHTS", "scope": "*", "weights": None, "instance": None,
                                                 "policy": None, "updated_at": 1, "updated_by": "poison"})
    produce(names.control, None, null_weights)
    p = Producer(KafkaSettings().producer())
    p.produce(names.control, key=b"\xff\xfeWEIGHTS:*", value=b"\xc3\x01 garbage")
    assert p.flush(15) == 0
    nan = Control(kind=ControlKind.WEIGHTS, scope="*", weights=Weights(fit=float("nan")), updated_at=1,
                  updated_by="poison")
    produce(names.control, nan.key, codec.encode(nan))
    # an instance claiming the control topic as its inbox: never routed to
    rogue = Instance(names, "rogue-1", agent_id="agent://demo/rogue", capability="demo.rogue", version="1.0.0")
    reg = rogue.registration().model_copy(update={"inbox_topic": names.control})
    produce(names.registry, "rogue-1", codec.encode(reg))
    produce(names.registry, "bad-reg", b"not a registration")
    # valid records under keys that are not UTF-8 (the key path alone): skipped, since the tombstone or
    # override of their real key could never undo them; echo-1 is not disabled, the garbled one never routed to
    disable = instance_record("echo-1", InstanceAction.DISABLE)
    p.produce(names.control, key=b"\xff\xfe" + disable.key.encode(), value=codec.encode(disable))
    garbled = Instance(names, "garbled-1", agent_id="agent://demo/garbled", capability="demo.garbled",
                       version="1.0.0")
    ensure(names, garbled.inbox)  # routable but for its key
    p.produce(names.registry, key=b"\xff\xfegarbled-1", value=codec.encode(garbled.registration()))
    assert p.flush(15) == 0

    good_message_completes(stream_app, sender)
    receipts = receipts_tail(names)
    lost = {sender.send(new_envelope("demo.rogue", {"x": 1})), sender.send(new_envelope("demo.garbled", {"x": 1}))}
    sender.flush()
    unroutable: set[str] = set()

    def all_unroutable() -> bool:
        unroutable.update(r.message_id for r in receipts.poll() if r.status is Status.UNROUTABLE)
        return lost <= unroutable

    wait_for(all_unroutable, 60, "UNROUTABLE for the rogue's and the garbled key's capabilities")
    receipts.close()

    # the bad records stay in the compacted topics: a restarted worker reads them again and still routes
    stream_app.stop()
    stream_app.start()
    good_message_completes(stream_app, sender)


def test_poison_on_a_delay_tier(namespace: str, stream_app: StreamApp, echo: Instance) -> None:
    names = Names(namespace)
    sender = Sender(names)
    wait_for(lambda: any(a["instance_id"] == "echo-1" for a in stream_app.get("/agents")), 30, "echo seen")
    good_message_completes(stream_app, sender)  # (creates the capability topic)
    tier, target = names.retry("1s"), names.capability(CAPABILITY)
    letters = dlq_tail(names)
    cases = {
        "BAD_DUE_AT": [(headers.DUE_AT, b"tomorrow"), (headers.TARGET, target.encode())],
        "BAD_TARGET": [(headers.DUE_AT, b"0"), (headers.TARGET, b"\xff\xfe")],
    }
    envelopes = {code: new_envelope(CAPABILITY, {"case": code}) for code in cases}
    for code, hdrs in cases.items():
        produce(tier, envelopes[code].message_id, codec.encode(envelopes[code]), hdrs)
    forged = new_envelope(CAPABILITY, {"case": "control"})
    produce(tier, forged.message_id, codec.encode(forged), [(headers.DUE_AT, b"0"),
                                                            (headers.TARGET, names.control.encode())])
    for code, env in envelopes.items():
        letter = letter_for(letters, dlq.REJECTED, message_id=env.message_id)
        assert letter.error is not None and letter.error.code == code and letter.origin_topic == tier
    assert letter_for(letters, dlq.REJECTED, message_id=forged.message_id).error.code == "BAD_TARGET"  # type: ignore[union-attr]
    wait_for(lambda: status_of(stream_app, forged.message_id) == "DEAD_LETTERED", 60, "the row DEAD_LETTERED")

    # the tier moves on: a good retry record behind the poison is forwarded and completes
    retry = new_envelope(CAPABILITY, {"case": "good"})
    produce(tier, retry.message_id, codec.encode(retry), [(headers.DUE_AT, str(now_ms()).encode()),
                                                          (headers.TARGET, target.encode())])
    wait_for(lambda: status_of(stream_app, retry.message_id) == "COMPLETED", 60, "the retried message COMPLETED")
    assert Tail(names.control).poll() == [], "nothing was forwarded into the control topic"
    letters.close()
    good_message_completes(stream_app, sender)
