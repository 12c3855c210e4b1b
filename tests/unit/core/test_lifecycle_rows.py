"""The one status fold (reach.core.lifecycle, on dicts) over generated receipt sequences: every row it writes has
this version's shape and is byte for byte what `StatusRow` writes, an exact duplicate changes nothing, the first
ending of a generation stays, a generation replies once, and the models' `fold` / `settle_reply` are the same
steps."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reach.core import lifecycle
from reach.core.allowance import CHILD_CALLS, CHILD_KEYS
from reach.core.lifecycle import MAX_ERROR_CHARS, MAX_RESULT_CHARS, STARTED_AT, StatusRow, fold, settle_reply
from reach.kafka import codec
from reach.records import (
    ChannelDelivery,
    Chunk,
    Decision,
    ErrorInfo,
    FanOut,
    FanOutDelivery,
    InputRequest,
    IntentResolution,
    Progress,
    Receipt,
    Status,
    Usage,
)

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
LONG = st.integers(0, 40).map(lambda n: "é" * (MAX_ERROR_CHARS - 20 + n))
MILLIS = st.integers(0, 2**45)


def _none_or(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


ERRORS = st.builds(ErrorInfo, kind=st.sampled_from(["DELIVERY", "HANDLER", "TIMEOUT"]),
                   code=st.sampled_from(["NO_ROUTE", "BOOM", "DELIVERY_TIMEOUT"]), message=st.one_of(TEXT, LONG))
RESULTS = st.one_of(st.binary(max_size=16), st.just(b"\xff\xfe broken utf-8"),
                    st.integers(0, 3).map(lambda n: b"r" * (MAX_RESULT_CHARS - 1 + n)))
DECISIONS = st.builds(Decision, topic=_none_or(st.sampled_from(["ns.inbox.a", "ns.inbox.b"])),
                      partition=_none_or(st.integers(0, 3)), offset=_none_or(st.integers(0, 10**6)))
TIMINGS = st.dictionaries(st.sampled_from([*CHILD_KEYS.values(), CHILD_CALLS, "decide_us", "run_ms", STARTED_AT]),
                          st.integers(-5, 10**6), max_size=3)
USAGES = st.builds(Usage, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6),
                   model=_none_or(TEXT), cost_micros=_none_or(st.integers(0, 10**9)), currency=_none_or(TEXT))
CHANNELS = st.builds(ChannelDelivery, channel=st.sampled_from(["email", "sms"]), provider_message_id=_none_or(TEXT))
RESOLUTIONS = st.builds(IntentResolution, stage=st.sampled_from(["handoff", "semantic"]), intent=TEXT)
PROGRESS = st.builds(Progress, fraction=_none_or(st.floats(0, 1)), note=_none_or(TEXT),
                     chunks=st.lists(st.builds(Chunk, seq=st.integers(0, 5), kind=st.just("text"), data=TEXT,
                                               append=st.booleans()), max_size=3))
INPUTS = st.builds(InputRequest, question=TEXT, turn=st.integers(1, 3), answer=_none_or(TEXT))
FANOUTS = st.builds(FanOut, deliveries=st.lists(st.builds(
    FanOutDelivery, agent_id=st.sampled_from(["a1", "a2"]), message_id=st.sampled_from(["m1-s0-a1", "m1-s0-a2"]),
    status=_none_or(st.sampled_from([Status.COMPLETED, Status.FAILED]))), max_size=2))


@st.composite
def receipts(draw: st.DrawFn) -> Receipt:
    """A receipt of message m1 or m2, of any status, with any of the fields the fold reads."""
    status = draw(st.sampled_from(list(Status)))
    return Receipt(
        message_id=draw(st.sampled_from(["m1", "m2"])), generation=draw(st.integers(0, 2)),
        trace_id=draw(st.sampled_from(["t1", "t2"])), tenant="acme", capability="echo",
        agent_id=draw(_none_or(st.sampled_from(["a1", "a2"]))),
        instance_id=draw(_none_or(st.sampled_from(["i1", "i2"]))), status=status, attempt=draw(st.integers(1, 3)),
        at=draw(st.integers(1_000, 1_100)), error=draw(_none_or(ERRORS)), result=draw(_none_or(RESULTS)),
        timings=draw(TIMINGS), decision=draw(_none_or(DECISIONS)), deadline=draw(_none_or(MILLIS)),
        delivery_timeout_ms=draw(_none_or(st.integers(0, 60_000))), reroutes=draw(st.integers(0, 2)),
        channel=draw(_none_or(CHANNELS)), resolution=draw(_none_or(RESOLUTIONS)), usage=draw(_none_or(USAGES)),
        callback=draw(_none_or(st.just("webhook:https://example.test/cb"))),
        progress=draw(PROGRESS) if status is Status.PROGRESS else None,
        input=draw(_none_or(INPUTS)) if status in (Status.INPUT_REQUIRED, Status.ACCEPTED) else None,
        fanout=draw(FANOUTS) if status is Status.FANNED_OUT else None,
    )


STEPS = st.lists(st.tuples(receipts(), _none_or(st.sampled_from(["ns.replies.c1", "ns.replies.c2"]))),
                 min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_every_row_is_what_the_model_writes_and_the_fold_keeps_its_rules(
        steps: list[tuple[Receipt, str | None]]) -> None:
    rows: dict[str, dict[str, Any]] = {}
    replied: set[tuple[str, int]] = set()
    for receipt, reply_to in steps:
        raw = codec.encode(receipt)
        decoded = codec.decode_dict("Receipt", raw)
        mid = receipt.message_id
        before = rows.get(mid)
        after, reply = lifecycle.apply(before, decoded, raw, reply_to=reply_to)
        assert lifecycle.shaped(after)
        assert orjson.dumps(after) == StatusRow.model_validate(after).model_dump_json().encode()
        again, twice = lifecycle.apply(after, decoded, raw, reply_to=reply_to)
        assert again == after and twice is None, "an exact duplicate changes nothing"
        if before is not None and before["status"] in lifecycle._TERMINAL and \
                receipt.generation <= before["generation"]:
            assert (after["status"], after["terminal_at"]) == (before["status"], before["terminal_at"]), \
                "the first ending of a generation stays"
        if reply is not None:
            assert (mid, after["generation"]) not in replied, "one reply per message and generation"
            replied.add((mid, after["generation"]))
        by_models = fold(None if before is None else StatusRow.model_validate(before), receipt, reply_to=reply_to)
        settled, model_reply = settle_reply(None if before is None else StatusRow.model_validate(before), by_models,
                                            receipt, raw)
        assert settled.model_dump(mode="json") == after and model_reply == reply, "the models' view is the same fold"
        rows[mid] = after


def test_a_row_of_an_older_shape_is_read_into_this_version() -> None:
    row = StatusRow(message_id="m1", trace_id="t", tenant="acme", capability="echo", generation=0,
                    status=Status.ROUTED, attempt=1, updated_at=4).model_dump(mode="json")
    older = {k: v for k, v in row.items() if k not in ("fanout", "children_usage")}  # written before v10
    assert not lifecycle.shaped(older)
    assert lifecycle.current(older) == row and lifecycle.current(row) is row, "read into this version's shape"
