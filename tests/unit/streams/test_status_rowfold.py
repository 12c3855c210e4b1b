"""The status fold's dict path (reach.core.rowfold) against the model path (reach.core.lifecycle) it replaces on the
common receipts: the same rows, byte for byte, and the same replies, for generated receipt sequences."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reach.core import rowfold
from reach.core.allowance import CHILD_CALLS, CHILD_KEYS
from reach.core.lifecycle import MAX_ERROR_CHARS, MAX_RESULT_CHARS, StatusRow, fold, settle_reply
from reach.kafka import codec
from reach.records import ChannelDelivery, Decision, ErrorInfo, IntentResolution, Receipt, Status, Usage

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
TIMINGS = st.dictionaries(st.sampled_from([*CHILD_KEYS.values(), CHILD_CALLS, "decide_us", "run_ms"]),
                          st.integers(-5, 10**6), max_size=3)
USAGES = st.builds(Usage, input_tokens=st.integers(0, 10**6), output_tokens=st.integers(0, 10**6),
                   model=_none_or(TEXT), cost_micros=_none_or(st.integers(0, 10**9)), currency=_none_or(TEXT))
CHANNELS = st.builds(ChannelDelivery, channel=st.sampled_from(["email", "sms"]), provider_message_id=_none_or(TEXT))
RESOLUTIONS = st.builds(IntentResolution, stage=st.sampled_from(["handoff", "semantic"]), intent=TEXT)


@st.composite
def receipts(draw: st.DrawFn, covered: bool = True) -> Receipt:
    """A receipt of message m1 or m2; `covered`: of the kinds the dict path folds (else any status, with the
    fields only the model path handles)."""
    statuses = sorted(rowfold.COVERED) if covered else list(Status)
    status = draw(st.sampled_from(statuses))
    return Receipt(
        message_id=draw(st.sampled_from(["m1", "m2"])), generation=draw(st.integers(0, 2)),
        trace_id=draw(st.sampled_from(["t1", "t2"])), tenant="acme", capability="echo",
        agent_id=draw(_none_or(st.sampled_from(["a1", "a2"]))),
        instance_id=draw(_none_or(st.sampled_from(["i1", "i2"]))), status=status, attempt=draw(st.integers(1, 3)),
        at=draw(st.integers(1_000, 1_100)), error=draw(_none_or(ERRORS)), result=draw(_none_or(RESULTS)),
        timings=draw(TIMINGS), decision=draw(_none_or(DECISIONS)), deadline=draw(_none_or(MILLIS)),
        delivery_timeout_ms=draw(_none_or(st.integers(0, 60_000))), reroutes=draw(st.integers(0, 2)),
        channel=draw(_none_or(CHANNELS)), resolution=draw(_none_or(RESOLUTIONS)), usage=draw(_none_or(USAGES)),
        callback=None if covered else draw(_none_or(st.just("webhook:https://example.test/cb"))),
    )


def _by_models(row: StatusRow | None, receipt: Receipt, raw: bytes, reply_to: str | None) -> tuple[
        StatusRow, bytes | None]:
    """What the fold did before the dict path (and still does for what `covers` leaves out)."""
    after = fold(row, receipt, reply_to=reply_to)
    return settle_reply(row, after, receipt, raw)


def _no_fallback(capability: str) -> str | None:
    return None


STEPS = st.lists(st.tuples(receipts(), _none_or(st.sampled_from(["ns.replies.c1", "ns.replies.c2"]))),
                 min_size=1, max_size=12)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_dict_path_writes_the_rows_and_replies_the_model_path_writes(
        steps: list[tuple[Receipt, str | None]]) -> None:
    models: dict[str, StatusRow] = {}
    dicts: dict[str, dict[str, Any]] = {}
    for receipt, reply_to in steps:
        raw = codec.encode(receipt)
        decoded = codec.decode_dict("Receipt", raw)
        mid = receipt.message_id
        before = dicts.get(mid)
        assert rowfold.covers(before, decoded, fallback_of=_no_fallback), (before, decoded)
        after, reply = rowfold.fold(before, decoded, raw, reply_to=reply_to)
        expected, expected_reply = _by_models(models.get(mid), codec.decode(raw, Receipt), raw, reply_to)
        assert orjson.dumps(after) == expected.model_dump_json().encode()
        assert reply == expected_reply
        assert (after is before or after == before) == (expected is models.get(mid) or expected == models.get(mid))
        models[mid], dicts[mid] = expected, after


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.one_of(receipts(), receipts(covered=False)), st.just("ns.replies.c1")),
                      min_size=1, max_size=12))
def test_the_dict_path_takes_only_what_it_folds_like_the_models_across_mixed_sequences(
        steps: list[tuple[Receipt, str | None]]) -> None:
    """Any receipt: where `covers` says yes the dict path's row is the model path's; otherwise the models fold it
    (as the fold does), and the next receipt starts from that row."""
    rows: dict[str, StatusRow] = {}
    for receipt, reply_to in steps:
        raw = codec.encode(receipt)
        decoded = codec.decode_dict("Receipt", raw)
        mid = receipt.message_id
        current = rows.get(mid)
        expected, expected_reply = _by_models(current, codec.decode(raw, Receipt), raw, reply_to)
        as_dict = current.model_dump(mode="json") if current is not None else None
        if rowfold.covers(as_dict, decoded, fallback_of=_no_fallback):
            after, reply = rowfold.fold(as_dict, decoded, raw, reply_to=reply_to)
            assert orjson.dumps(after) == expected.model_dump_json().encode()
            assert reply == expected_reply
        rows[mid] = expected


def test_a_row_of_an_older_shape_or_with_bookkeeping_goes_to_the_models() -> None:
    receipt = codec.decode_dict("Receipt", codec.encode(Receipt(
        message_id="m1", trace_id="t", tenant="acme", capability="echo", status=Status.STARTED, at=5)))
    row = StatusRow(message_id="m1", trace_id="t", tenant="acme", capability="echo", generation=0,
                    status=Status.ROUTED, attempt=1, updated_at=4).model_dump(mode="json")
    assert rowfold.covers(row, receipt, fallback_of=_no_fallback)
    older = {k: v for k, v in row.items() if k not in ("fanout", "children_usage")}  # written before v10
    assert not rowfold.shaped(older) and not rowfold.covers(older, receipt, fallback_of=_no_fallback)
    assert rowfold.current(older) == row and rowfold.current(row) is row, "read into this version's shape"
    for field, value in [("callback", "webhook:https://example.test"), ("fallback_pending", True),
                         ("turns", [{"turn": 1, "generation": 1, "question": "q", "answer": "a", "at": 1}])]:
        assert not rowfold.covers({**row, field: value}, receipt, fallback_of=_no_fallback), field
    ending = {**receipt, "status": "COMPLETED"}
    assert rowfold.covers(row, ending, fallback_of=_no_fallback)
    assert not rowfold.covers(row, ending, fallback_of=lambda capability: "backup"), "a POLICY fallback decides"
