"""A subscriber's filter (pure): tags or JSONPath, no regex ever, refused at declaration with the reason."""

from __future__ import annotations

import json

import pytest

from reach.agent import Agent, InvalidDeclaration
from reach.core import marks
from reach.core.eventfilter import MAX_FILTERED_PAYLOAD, NOT_JSON, BadFilter, Event, Filter, parse
from reach.records import CapabilityMode


def test_tags_and_jsonpath_filters_match_what_they_say() -> None:
    assert parse("tags:urgent, eu").matches(["eu", "urgent", "x"], NOT_JSON)
    assert not parse("tags:urgent,eu").matches(["urgent"], NOT_JSON)
    assert parse("$[?(@.amount > 100)]").matches([], {"amount": 150})
    assert not parse("$[?(@.amount > 100)]").matches([], {"amount": "many"}), "a comparison it cannot make: no"
    assert parse("$.items[?(@.qty > 5)]").matches([], {"items": [{"qty": 7}]})
    assert not parse("$.priority").matches([], NOT_JSON)
    event = Event({"payload": b'{"priority": 1}', "content_type": "application/json", "routing": {"tags": ["a"]}})
    assert event.passes("$.priority") and event.passes("tags:a") and event.passes(None)
    assert not event.passes("not a filter"), "one the router cannot parse matches nothing"


@pytest.mark.parametrize("text", ["tags:", "amount > 100", "$[?(@.name =~ \"(a|aa)+$\")]", "$.a.sub(/x/, y)",
                                  "$[" + "x" * 300])
def test_a_filter_that_is_not_one_or_runs_a_regex_is_refused(text: str) -> None:
    with pytest.raises(BadFilter):
        parse(text)


def test_the_sdk_refuses_a_bad_filter_or_a_filter_on_a_handler_at_declaration() -> None:
    agent = Agent("agent://demo/f")
    with pytest.raises(InvalidDeclaration, match="regular expression"):
        agent.capability("demo.f", version="1.0.0", mode=CapabilityMode.SUBSCRIBE, filter='$[?(@.a =~ "x")]')
    with pytest.raises(InvalidDeclaration, match="SUBSCRIBE"):
        agent.capability("demo.f", version="1.0.0", filter="tags:a")
    agent.capability("demo.f", version="1.0.0", mode=CapabilityMode.SUBSCRIBE, filter="tags:a")(lambda p: p)
    assert agent.capabilities["demo.f"].record.filter == "tags:a"


def test_a_notification_mark_survives_only_on_the_id_derived_from_it() -> None:
    header = {"reach-notify-of": "m1"}
    assert marks.kept(header, message_id="m1-n0-demo.audit", to_agent="agent://demo/audit") == header
    assert marks.kept(header, message_id="m2", to_agent="agent://demo/audit") == {}


def test_a_large_payload_matches_no_jsonpath_filter_and_each_filter_runs_once_per_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Security review of this session: a JSONPath's cost grows with the payload and the router evaluated it again
    for every instance declaring it. Over 16 KiB a payload matches no JSONPath filter (tags still do); a filter text
    is evaluated once per event."""
    items = {"items": [{"qty": 9}] + [{}] * 6_000, "tag": "x"}
    big = {"capability": "c", "payload": json.dumps(items).encode(), "routing": {"tags": ["urgent"]}}
    assert len(big["payload"]) > MAX_FILTERED_PAYLOAD
    event = Event(big)
    assert not event.passes("$.items[?(@.qty > 5)]") and event.passes("tags:urgent")
    small = Event({"capability": "c", "payload": json.dumps({"items": [{"qty": 9}]}).encode()})
    assert small.passes("$.items[?(@.qty > 5)]")
    calls: list[object] = []
    real = Filter.matches

    def counted(self: Filter, tags: object, payload: object) -> bool:
        calls.append(payload)
        return real(self, tags, payload)  # type: ignore[arg-type]

    monkeypatch.setattr(Filter, "matches", counted)
    again = Event({"capability": "c", "payload": b'{"priority": 1}'})
    assert all(again.passes("$.priority") for _ in range(50)) and len(calls) == 1
