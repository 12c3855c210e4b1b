"""JSONPath selection of a result's fields: one match is its value, several a list, none null and listed."""

from __future__ import annotations

from reach.channels.select import select

RESULT = {"answer": "42", "items": [{"id": 1}, {"id": 2}], "meta": {"ok": True, "empty": None}}


def test_single_match_is_the_value_and_several_are_a_list() -> None:
    values, unmatched = select(RESULT, ["$.answer", "$.items[*].id", "$.items[0].id", "$.meta.ok"])
    assert values == {"$.answer": "42", "$.items[*].id": [1, 2], "$.items[0].id": 1, "$.meta.ok": True}
    assert unmatched == []


def test_a_path_that_matches_nothing_is_null_and_listed() -> None:
    values, unmatched = select(RESULT, ["$.missing", "$.items[5].id", "$.answer"])
    assert values == {"$.missing": None, "$.items[5].id": None, "$.answer": "42"}
    assert unmatched == ["$.missing", "$.items[5].id"]


def test_a_present_null_is_a_match_not_a_miss() -> None:
    values, unmatched = select(RESULT, ["$.meta.empty"])
    assert values == {"$.meta.empty": None} and unmatched == []


def test_a_result_that_is_not_an_object_matches_nothing_below_the_root() -> None:
    assert select(None, ["$.a"]) == ({"$.a": None}, ["$.a"])
    assert select([1, 2], ["$[1]"]) == ({"$[1]": 2}, [])


def test_filter_expressions_work() -> None:
    values, _ = select(RESULT, ["$.items[?(@.id > 1)].id"])
    assert values == {"$.items[?(@.id > 1)].id": 2}


def test_regular_expressions_are_refused_when_the_spec_is_parsed() -> None:
    import pytest

    from reach.channels.errors import BadCallback
    from reach.channels.select import check_fields

    for expression in ('$.i[?(@.t =~ "(a|aa)+$")]', '$.i[?(@.n > 1 && @.t =~ "x")].t', '$.a.`sub(/(a|aa)+$/, b)`'):
        with pytest.raises(BadCallback, match="regular expression"):
            check_fields([expression])
    assert check_fields(['$.items[?(@.id > 1)].id', '$.items[?(@.kind == "a")].id'])  # comparisons stay


def test_a_stored_spec_with_a_regex_field_is_rejected_by_the_fold_not_evaluated() -> None:
    import json

    from reach.channels.closure import settle_callback
    from reach.core.lifecycle import StatusRow
    from reach.records import Receipt, Status

    spec = json.dumps({"channel": "webhook", "endpoint": "https://example.com/h",
                       "fields": ['$.i[?(@.t =~ "(a|aa)+$")]']})
    result = json.dumps({"i": [{"t": "a" * 40 + "b"}]})  # seconds to minutes of backtracking if it ran
    row = StatusRow(message_id="m1", trace_id="t1", tenant="acme", capability="demo.echo", status=Status.COMPLETED,
                    generation=0, attempt=1, updated_at=1, terminal_at=1, callback=spec, result=result)
    receipt = Receipt(message_id="m1", trace_id="t1", tenant="acme", capability="demo.echo", status=Status.COMPLETED,
                      at=1)
    _, out = settle_callback(row, receipt, now=2)
    assert isinstance(out, Receipt) and out.status is Status.REJECTED
    assert out.error is not None and out.error.code == "BAD_CALLBACK" and "regular expression" in out.error.message
