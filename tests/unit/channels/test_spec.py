"""Callback specs: the JSON and short forms, fields, and every way a spec is refused (pure)."""

from __future__ import annotations

import json

import pytest

from reach.channels.errors import BadCallback
from reach.channels.spec import CallbackSpec, callback_text, parse, split_fields


def test_short_form_with_fields() -> None:
    spec = parse("webhook:https://example.com/hook", fields=["$.answer"])
    assert spec == CallbackSpec(channel="webhook", endpoint="https://example.com/hook", fields=("$.answer",))
    assert spec.capability == "channel.webhook"


def test_json_form_round_trips_through_the_canonical_text() -> None:
    text = json.dumps({"channel": "email", "endpoint": "ops@example.com", "fields": ["$.a", "$.b[0]"]})
    spec = parse(text)
    assert parse(spec.to_text()) == spec
    assert json.loads(spec.to_text()) == {"channel": "email", "endpoint": "ops@example.com",
                                          "fields": ["$.a", "$.b[0]"]}


def test_callback_text_is_what_the_client_stores() -> None:
    text = callback_text("sms:+15551234567", "$.a,$.items[0,1].id")
    assert json.loads(text) == {"channel": "sms", "endpoint": "+15551234567", "fields": ["$.a", "$.items[0,1].id"]}


def test_split_fields_keeps_commas_inside_brackets_and_quotes() -> None:
    assert split_fields("$.a, $.b[0,1] ,$['x,y']") == ["$.a", "$.b[0,1]", "$['x,y']"]
    assert split_fields(None) == [] and split_fields("") == []


@pytest.mark.parametrize(("text", "says"), [
    ("", "1 to"),
    ("x" * 5000, "1 to"),
    ("pigeon:coo", "neither JSON nor CHANNEL:ENDPOINT"),
    ("ftp://example.com/hook", "neither JSON nor CHANNEL:ENDPOINT"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be an object"),
    ('{"channel": "fax", "endpoint": "1"}', "unknown channel 'fax'"),
    ('{"channel": "webhook"}', "string `channel` and `endpoint`"),
    ('{"channel": "webhook", "endpoint": "https://h/x", "fields": "$.a"}', "list of JSONPath"),
    ('{"channel": "webhook", "endpoint": "https://h/x", "extra": {}}', "unknown keys ['extra']"),
    ('{"channel": "sms", "endpoint": "+15551234567", "backup": {}}', "must be {"),
    ('{"channel": "sms", "endpoint": "+15551234567", "backup": {"channel": "sms", "endpoint": "+15551234568"}}',
     "another channel"),
    ('{"channel": "sms", "endpoint": "+15551234567", "backup": {"channel": "email", "endpoint": "x"}}',
     "not one address"),
    ("webhook:ftp://example.com/x", "not an http(s) URL"),
    ("webhook:https:///nohost", "not an http(s) URL"),
    ("email:not-an-address", "not one address"),
    ("email:a@b.com,c@d.com", "not one address"),
    ("sms:call-me", "not a phone number"),
])
def test_malformed_specs_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(BadCallback, match=None) as caught:
        parse(text)
    assert says in str(caught.value)


def test_bad_jsonpath_and_too_many_fields_are_refused() -> None:
    with pytest.raises(BadCallback, match="not valid JSONPath"):
        parse("webhook:https://example.com/h", fields=["$.[[["])
    with pytest.raises(BadCallback, match="starting with"):
        parse("webhook:https://example.com/h", fields=["answer"])
    with pytest.raises(BadCallback, match="at most 32"):
        parse("webhook:https://example.com/h", fields=[f"$.f{i}" for i in range(33)])


def test_fields_without_a_callback_are_refused() -> None:
    with pytest.raises(BadCallback, match="without a callback"):
        callback_text(None, "$.a")


def test_a_backup_target_round_trips() -> None:
    text = json.dumps({"channel": "sms", "endpoint": "+15551234567",
                       "backup": {"channel": "email", "endpoint": "ops@example.com"}})
    spec = parse(text)
    assert spec.backup is not None and spec.backup.to_dict() == {"channel": "email", "endpoint": "ops@example.com"}
    assert parse(spec.to_text()) == spec


def test_a_bare_url_is_a_webhook_as_the_gateway_body_carries_it() -> None:
    assert parse("https://example.com/hook") == CallbackSpec(channel="webhook", endpoint="https://example.com/hook")
