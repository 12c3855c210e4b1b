"""Operations on messages are audit events (issue 37, finding 11): a handoff taken, answered or re-routed, an
operator's cancel and a dead-letter redrive append HANDOFF / CANCEL / REDRIVE to `<ns>.audit` with their actor,
and the history says how far that actor can be believed. On the in-memory bus."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from reach.cli import app
from reach.core.audit import AuditBook, operation
from reach.ops import audit as ops_audit
from reach.ops import handoff as ops_handoff
from reach.records import AuditKind
from reach.settings import KafkaSettings
from tests.unit.ops.test_ops_audit import NAMES, kafka  # noqa: F401 - the in-memory bus fixture

SECRET_ANSWER = "the customer's card ends in 4242"


class Desk:
    """The handoff desk's moves, as the ops layer calls them (HandoffDesk is tested on its own)."""

    def __init__(self, bus: KafkaSettings) -> None:
        self.names, self.kafka = NAMES, bus
        self.moves: list[tuple[str, str, Any]] = []

    def take(self, message_id: str, *, by: str) -> str:
        self.moves.append(("take", message_id, by))
        return "taken"

    def answer(self, message_id: str, answer: str, *, by: str) -> str:
        self.moves.append(("answer", message_id, by))
        return "answered"

    def reroute(self, message_id: str, capability: str, *, by: str) -> str:
        self.moves.append(("reroute", message_id, by))
        return "rerouted"


@pytest.fixture
def desk(kafka: KafkaSettings) -> Iterator[Desk]:  # noqa: F811 - the fixture imported above
    yield Desk(kafka)


def test_handoff_moves_are_audit_events_with_their_actor_and_without_the_answer(desk: Desk) -> None:
    ops_handoff.take(desk, "m1", by="console:ada")  # type: ignore[arg-type]
    ops_handoff.resolve(desk, "m1", by="console:ada", answer=SECRET_ANSWER)  # type: ignore[arg-type]
    ops_handoff.resolve(desk, "m2", by="reach-cli:bob", capability="demo.echo")  # type: ignore[arg-type]
    rows = ops_audit.history(names=NAMES, kafka=desk.kafka, kinds=["handoff"])
    assert [(r["subject"], r["after"], r["actor"], r["actor_source"]) for r in rows] == [
        ("m1", {"action": "take"}, "console:ada", "authenticated"),
        ("m1", {"action": "answer"}, "console:ada", "authenticated"),
        ("m2", {"action": "reroute", "capability": "demo.echo"}, "reach-cli:bob", "asserted")]
    assert SECRET_ANSWER not in json.dumps(rows)


def test_an_operators_cancel_is_an_audit_event(kafka: KafkaSettings,  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.kafka import memory

    memory.bus(kafka.bootstrap[len(memory.SCHEME):]).create_topic(NAMES.cancels, 1)  # type: ignore[index]
    monkeypatch.setenv("REACH_BOOTSTRAP", kafka.bootstrap or "")
    monkeypatch.setenv("REACH_NAMESPACE", NAMES.namespace)
    monkeypatch.setenv("REACH_OPERATOR", "bob")
    done = CliRunner().invoke(app, ["cancel", "m9", "--json"])
    assert done.exit_code == 0, done.output
    [row] = ops_audit.history(names=NAMES, kafka=kafka, kinds=["cancel"])
    assert (row["subject"], row["actor"], row["actor_source"]) == ("m9", "reach-cli:bob", "asserted")


def test_operation_events_never_become_a_view_of_the_audit_writer() -> None:
    book = AuditBook()
    for kind in (AuditKind.REDRIVE, AuditKind.HANDOFF, AuditKind.CANCEL):
        book.seed(operation(kind, "m1", actor="console:ada", at=1, after={"x": 1}))
    assert book.registration("m1", None, ts_ms=2, source="s") == []
    with pytest.raises(ValueError, match="not an operation kind"):
        operation(AuditKind.WEIGHTS, "m1", actor="a", at=1, after={})


def test_a_redrive_is_an_audit_event_per_letter_replayed(kafka: KafkaSettings) -> None:  # noqa: F811
    from reach import dlq
    from reach.envelopes import new_envelope
    from reach.kafka import codec, memory
    from reach.ops import dlq as ops_dlq
    from reach.records import DeadLetter
    from reach.settings import ReachSettings

    bus = memory.bus(kafka.bootstrap[len(memory.SCHEME):])  # type: ignore[index]
    env = new_envelope("demo.echo", {"n": 1})
    for topic in (NAMES.receipts, NAMES.replays, NAMES.capability("demo.echo")):
        bus.create_topic(topic, 1)
    record = DeadLetter(envelope=codec.encode(env), reason="poison", message_id=env.message_id, first_failure_at=1,
                        last_failure_at=1, origin_topic=NAMES.capability("demo.echo"), origin_partition=0,
                        origin_offset=7)
    letter = dlq.Letter(id="0:7", record=record, timestamp=1, envelope=env)
    done = ops_dlq.replay_letters([letter], settings=ReachSettings(namespace=NAMES.namespace), kafka=kafka,
                                  dry_run=False, rate=None, lookup=lambda _mid: None, by="console:ada")
    assert done.replayed == [env.message_id]
    [row] = ops_audit.history(names=NAMES, kafka=kafka, kinds=["redrive"])
    assert (row["subject"], row["after"], row["actor_source"]) == (
        env.message_id, {"letter": "0:7", "to_capability": None}, "authenticated")
