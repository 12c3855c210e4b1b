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
