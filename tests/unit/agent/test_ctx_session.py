"""ctx.session (pure): what a run writes back, and the clear failure past the cap."""

from __future__ import annotations

import pytest

from reach.agent import session
from reach.agent.agent import Context
from reach.agent.exceptions import InvalidSession
from reach.agent.outcomes import Outcome, Verdict
from reach.core.sessionmap import MAX_SNAPSHOT_BYTES, decode_record
from reach.envelopes import new_envelope
from reach.records import Envelope

DONE = Verdict(Outcome.COMPLETE, value=b"{}")


def _ctx(snapshot: str | None = None, session_key: str | None = "s1") -> Context:
    envelope = new_envelope("demo.echo", {}, session_key=session_key, session_snapshot=snapshot, tenant="acme")
    return Context(envelope=envelope, agent_id="agent://demo/echo", instance_id="i-1")


def test_a_changed_snapshot_is_written_back_under_the_tenants_session() -> None:
    ctx = _ctx('{"n": 1}')
    assert ctx.session == {"n": 1}
    ctx.session["n"] += 1
    verdict, text = session.checked(ctx.envelope, ctx._session, DONE)
    assert verdict is DONE and text == '{"n":2}'
    key, value = session.record(ctx.envelope, "i-1", text)
    assert key == "acme/s1"
    assert decode_record(value).snapshot == '{"n":2}'


def test_nothing_is_written_when_nothing_changed_or_the_run_did_not_complete() -> None:
    ctx = _ctx("objects/s1.json")  # a reference, not a JSON object: ctx.session starts empty
    assert ctx.session == {} and ctx.session_snapshot == "objects/s1.json"
    assert session.checked(ctx.envelope, ctx._session, DONE) == (DONE, None)
    ctx.session["x"] = 1
    failed = Verdict(Outcome.FAIL)
    assert session.checked(ctx.envelope, ctx._session, failed) == (failed, None)
    assert session.checked(ctx.envelope, None, DONE) == (DONE, None), "never read: nothing to write"
    no_session = _ctx(session_key=None)
    no_session.session["x"] = 1
    assert session.checked(no_session.envelope, no_session._session, DONE) == (DONE, None)


def test_a_snapshot_past_the_cap_or_not_json_fails_the_run_with_the_reason() -> None:
    ctx = _ctx()
    ctx.session = {"big": "x" * MAX_SNAPSHOT_BYTES}
    verdict, text = session.checked(ctx.envelope, ctx._session, DONE)
    assert text is None and verdict.outcome is Outcome.FAIL
    assert verdict.error is not None and verdict.error.code == "SESSION_TOO_LARGE"
    assert "16,384" in verdict.error.message
    ctx.session = {"when": object()}
    verdict, _ = session.checked(ctx.envelope, ctx._session, DONE)
    assert verdict.error is not None and verdict.error.code == "SESSION_NOT_JSON"
    with pytest.raises(InvalidSession):
        ctx.session = ["not", "a", "dict"]  # type: ignore[assignment]


def test_a_subscribers_run_reads_the_session_but_never_writes_it() -> None:
    from reach.core import fanout
    from reach.kafka import codec

    ctx = _ctx('{"n": 1}')
    as_dict = codec.decode_dict("Envelope", codec.encode(ctx.envelope))
    for child in (fanout.notification(as_dict, "agent://demo/audit"), fanout.delivery(as_dict, "agent://demo/audit")):
        observer = Context(envelope=Envelope.model_validate(child), agent_id="agent://demo/audit", instance_id="i-2")
        assert observer.session == {"n": 1}
        observer.session["n"] = 2
        assert session.checked(observer.envelope, observer._session, DONE) == (DONE, None)
