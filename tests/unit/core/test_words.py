"""Answers in words: a text answer fills a one-string-property schema, is taken as JSON the schema accepts, and
anything else is refused with an example built from the schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reach.core import words
from reach.core.turns import AnswerRefused, checked_answer

NAME = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
PERSON = {"type": "object", "required": ["name", "age"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}


def waiting(schema: Any) -> dict[str, Any]:
    return {"input": {"question": "Who?", "answer_schema": json.dumps(schema), "kind": "input"}}


def taken(schema: Any, answer: Any) -> Any:
    return json.loads(checked_answer(waiting(schema), answer).answer or "null")


def test_a_text_answer_fills_the_one_string_property() -> None:
    assert taken(NAME, "Ada Lovelace") == {"name": "Ada Lovelace"}


def test_a_text_answer_is_kept_as_text_when_the_schema_asks_for_a_string() -> None:
    assert taken({"type": "string"}, "yes") == "yes"


def test_a_text_answer_that_is_json_matching_the_schema_is_taken() -> None:
    assert taken(PERSON, '{"name": "Ada", "age": 36}') == {"name": "Ada", "age": 36}
    assert taken({"type": "integer"}, "42") == 42


def test_a_data_answer_is_checked_as_before() -> None:
    assert taken(NAME, {"name": "Ada"}) == {"name": "Ada"}
    with pytest.raises(AnswerRefused):
        taken(NAME, {"nom": "Ada"})


@pytest.mark.parametrize("answer", ["Ada, 36", '{"name": "Ada"}', "", "{not json", "[" * 5000])
def test_anything_else_says_what_to_send_with_an_example_from_the_schema(answer: str) -> None:
    with pytest.raises(AnswerRefused) as refused:
        taken(PERSON, answer)
    assert refused.value.status == 400 and refused.value.code == "invalid_answer"
    assert 'send JSON like {"name": "...", "age": 0}' in refused.value.hint
    assert "text answer fits only" in refused.value.message


def test_examples_use_what_the_schema_gives_and_stay_bounded() -> None:
    assert words.example({"type": "object", "properties": {"size": {"enum": ["S", "M"]}}}) == {"size": "S"}
    assert words.example({"type": "array", "items": {"type": "boolean"}}) == [True]
    assert words.example({"examples": [{"x": 1}]}) == {"x": 1}
    deep: dict[str, Any] = {"type": "object", "required": ["a"], "properties": {}}
    deep["properties"]["a"] = deep  # a self-referencing schema ends at the depth bound
    assert words.example_text(deep).count("{") == words.MAX_EXAMPLE_DEPTH + 1
    assert words.example("not a schema") is None
    assert words.only_string_property({"properties": {"a": {"type": "string"}, "b": {"type": "string"}}}) is None
