"""The callback a terminal row produces (pure): once per generation, with the selected fields, or a REJECTED
receipt for a spec that does not parse; delivery steps stay in the timeline."""

from __future__ import annotations

import json
from functools import reduce

import pytest

from reach.channels.closure import callback_id, settle_callback
from reach.channels.spec import callback_text
from reach.core.lifecycle import FallbackRef, StatusRow, fold
from reach.records import TERMINAL, ChannelDelivery, Envelope, ErrorInfo, Receipt, Status

SPEC = callback_text("webhook:https://example.com/hook", "$.answer,$.missing")


def r(status: Status, at: int, *, generation: int = 0, **kw: object) -> Receipt:
    return Receipt(message_id="m1", generation=generation, trace_id="t1", tenant="acme", capability="demo.echo",
                   status=status, at=at, **kw)  # type: ignore[arg-type]


def folded(*receipts: Receipt) -> tuple[StatusRow, list[Envelope | Receipt]]:
    """Fold like the status fold does: fold, then settle the callback; collect what it would produce."""
    row: StatusRow | None = None
    out: list[Envelope | Receipt] = []
    for receipt in receipts:
        row, made = settle_callback(fold(row, receipt), receipt, now=1_000)
        if made is not None:
            out.append(made)
    assert row is not None
    return row, out


def test_a_terminal_row_with_a_callback_produces_one_envelope_for_the_channel() -> None:
    row, out = folded(r(Status.STARTED, 1, callback=SPEC, instance_id="i1"),
                      r(Status.COMPLETED, 2, callback=SPEC, result=b'{"answer": "42", "other": 1}'),
                      r(Status.COMPLETED, 3, callback=SPEC, result=b'{"answer": "42"}'))  # a duplicate terminal
    assert row.callback_sent and len(out) == 1
    envelope = out[0]
    assert isinstance(envelope, Envelope)
    assert envelope.message_id == callback_id("m1", 0) == "m1-cb0"
    assert (envelope.capability, envelope.trace_id, envelope.parent_id, envelope.tenant) == (
        "channel.webhook", "t1", "m1", "acme")
    assert envelope.callback is None  # a callback's own outcome never calls back
    payload = json.loads(envelope.payload)
    assert payload["endpoint"] == "https://example.com/hook"
    assert payload["callback_for"] == {"message_id": "m1", "generation": 0, "capability": "demo.echo"}
    assert payload["body"] == {"message_id": "m1", "trace_id": "t1", "capability": "demo.echo", "status": "COMPLETED",
                               "fields": {"$.answer": "42", "$.missing": None}, "unmatched": ["$.missing"],
                               "error": None}


def test_the_same_receipts_folded_again_produce_the_same_envelope() -> None:
    receipts = (r(Status.STARTED, 1, callback=SPEC), r(Status.COMPLETED, 2, result=b'{"answer": 1}'))
    first, again = folded(*receipts)[1], folded(*receipts)[1]
    assert first == again


def test_no_callback_without_a_spec_or_before_the_end() -> None:
    assert folded(r(Status.STARTED, 1), r(Status.COMPLETED, 2))[1] == []
    row, out = folded(r(Status.STARTED, 1, callback=SPEC))
    assert out == [] and not row.callback_sent


def test_a_spec_learned_after_the_end_still_calls_back() -> None:
    _, out = folded(r(Status.COMPLETED, 2, result=b"{}"), r(Status.STARTED, 1, callback=SPEC))
    assert len(out) == 1 and isinstance(out[0], Envelope)


def test_a_failure_carries_its_error_and_a_note_when_there_is_no_result() -> None:
    error = ErrorInfo(kind="BUSINESS", code="NOPE", message="no such order")
    _, out = folded(r(Status.FAILED, 2, callback=SPEC, error=error))
    body = json.loads(out[0].payload)["body"]  # type: ignore[union-attr]
    assert body["status"] == "FAILED" and body["error"] == error.model_dump()
    assert body["fields"] == {"$.answer": None, "$.missing": None}
    assert body["note"] == "the message ended without a result"


def test_a_malformed_spec_becomes_a_rejected_receipt_with_the_reason() -> None:
    row, out = folded(r(Status.COMPLETED, 2, callback="webhook:ftp://nope", result=b"{}"))
    assert row.callback_sent
    rejected = out[0]
    assert isinstance(rejected, Receipt) and rejected.status is Status.REJECTED
    assert rejected.message_id == "m1-cb0" and rejected.trace_id == "t1" and rejected.capability == "channel.webhook"
    assert rejected.error is not None and rejected.error.code == "BAD_CALLBACK"
    assert "not an http(s) URL" in rejected.error.message


def test_a_replay_calls_back_again_for_its_generation() -> None:
    _, out = folded(r(Status.COMPLETED, 2, callback=SPEC, result=b"{}"),
                    r(Status.STARTED, 5, generation=1, callback=SPEC),
                    r(Status.COMPLETED, 6, generation=1, callback=SPEC, result=b"{}"))
    assert [e.message_id for e in out] == ["m1-cb0", "m1-cb1"]


def test_delivery_steps_stay_in_the_timeline_and_keep_the_row_status() -> None:
    info = ChannelDelivery(channel="sms", provider_message_id="p-1")
    row = reduce(fold, [r(Status.STARTED, 1), r(Status.SENT, 2, channel=info), r(Status.DELIVERED, 3, channel=info),
                        r(Status.COMPLETED, 4, result=b"{}"), r(Status.READ, 5, channel=info),
                        r(Status.CALLBACKED, 6, channel=info)], None)
    assert row is not None and row.status is Status.COMPLETED and row.terminal_at == 4
    assert [s.status for s in row.timeline] == [Status.STARTED, Status.SENT, Status.DELIVERED, Status.COMPLETED,
                                               Status.READ, Status.CALLBACKED]
    assert row.timeline[1].channel == info
    assert not any(s.is_terminal for s in (Status.SENT, Status.DELIVERED, Status.READ, Status.CALLBACKED))


def test_a_sent_step_does_not_move_a_started_row() -> None:
    row = reduce(fold, [r(Status.STARTED, 1), r(Status.SENT, 2)], None)
    assert row is not None and row.status is Status.STARTED


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_every_terminal_status_calls_back_once_per_generation(status: Status) -> None:
    """However the message ended (the router's REJECTED, UNROUTABLE, its OVERLOAD / UNAVAILABLE FAILED, the
    timekeeper's EXPIRED before any agent started it, an agent's CANCELED ...): one callback, and one again for a
    replay's generation."""
    error = None if status is Status.COMPLETED else ErrorInfo(kind="K", code="C", message="why")
    row, out = folded(r(Status.ROUTED, 1, callback=SPEC), r(status, 2, error=error), r(status, 3, error=error),
                      r(Status.ROUTED, 4, generation=1, callback=SPEC), r(status, 5, generation=1, error=error))
    assert [e.message_id for e in out] == ["m1-cb0", "m1-cb1"]
    assert all(isinstance(e, Envelope) and json.loads(e.payload)["body"]["status"] == status.value for e in out)


def test_a_row_that_learns_its_spec_only_from_the_routed_receipt_still_calls_back_on_expiry() -> None:
    """EXPIRED before any agent started it: the router's ROUTED receipt is the only one written from the envelope."""
    _, out = folded(r(Status.ROUTED, 1, callback=SPEC), r(Status.EXPIRED, 9))
    assert [e.message_id for e in out] == ["m1-cb0"]


def test_a_message_its_fallback_serves_leaves_the_callback_to_the_child() -> None:
    """The child carries the spec (reach.core.fallback): the caller hears once, of the chain's final outcome."""
    row, _ = folded(r(Status.ROUTED, 1, callback=SPEC))
    ended = fold(row, r(Status.FAILED, 2))
    served = ended.model_copy(update={"fallback": FallbackRef(capability="demo.echo", message_id="m1-fb0")})
    after, made = settle_callback(served, r(Status.FAILED, 2), now=1)
    assert made is None and after.callback_sent
    waiting, made = settle_callback(ended.model_copy(update={"fallback_pending": True}), r(Status.FAILED, 2), now=1)
    assert made is None and not waiting.callback_sent, "waits until it knows whether a child is sent"
    unsent = ended.model_copy(update={"fallback": FallbackRef(capability="demo.echo", note="gone")})
    after, made = settle_callback(unsent, r(Status.FAILED, 2), now=1)
    assert isinstance(made, Envelope) and after.callback_sent, "no child went: the message calls back itself"


def test_a_question_goes_out_once_per_turn_and_its_reply_answers_it() -> None:
    from reach.channels.tokens import ReplyClaims, answers_of, mint, read
    from reach.records import InputRequest

    asked = InputRequest(question="What is your name?", answer_schema='{"type":"object"}', turn=1)
    answered = asked.model_copy(update={"answer": '{"name":"Ada"}'})
    row, out = folded(r(Status.STARTED, 1, callback=SPEC, instance_id="i1"),
                      r(Status.INPUT_REQUIRED, 2, callback=SPEC, instance_id="i1", input=asked),
                      r(Status.INPUT_REQUIRED, 3, callback=SPEC, instance_id="i1", input=asked),  # redelivered
                      r(Status.ACCEPTED, 4, generation=1, callback=SPEC, input=answered),
                      r(Status.COMPLETED, 5, generation=1, callback=SPEC, result=b'{"answer": "hi Ada"}'))
    question, ending = out
    assert isinstance(question, Envelope) and isinstance(ending, Envelope)
    assert (question.message_id, ending.message_id) == ("m1-cb0", "m1-cb1")
    payload = json.loads(question.payload)
    assert payload["answer_for"] == {"message_id": "m1", "generation": 0} and "callback_for" not in payload
    assert payload["body"]["question"] == "What is your name?" and payload["body"]["answer_schema"] == {
        "type": "object"}
    assert "asks: What is your name?" in payload["subject"] and payload["reply_capability"] == "demo.echo"
    assert json.loads(ending.payload)["body"]["fields"] == {"$.answer": "hi Ada", "$.missing": None}
    token = mint(b"s", ReplyClaims(message_id=question.message_id, trace_id="t1", tenant="acme", expires_at=10**13,
                                   capability=payload["reply_capability"], answers=answers_of(payload)))
    assert read(b"s", token, now=1).answers == "m1"
