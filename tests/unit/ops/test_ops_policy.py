"""Policy per capability (`reach policy`): the fields given are parsed, merged into the scope's own record and
published; the report says per field where its value comes from, with the consistency warnings."""

from __future__ import annotations

import pytest

from reach.errors import ConfigError, InvalidName
from reach.names import Names
from reach.ops import policy as ops
from reach.records import Control
from reach.settings import KafkaSettings

NAMES = Names("t")
TIERS = ["5s", "30s", "5m"]


def test_changes_keep_the_given_fields_in_order_and_parse_durations() -> None:
    assert ops.changes({"budget_ms": "2m", "max_attempts": None, "backoff_base_ms": 200, "handoff": False}) == {
        "budget_ms": 120_000, "backoff_base_ms": 200, "handoff": False}
    assert list(ops.changes({"slow_threshold_ms": "2s", "max_attempts": 3})) == ["slow_threshold_ms", "max_attempts"]


def test_changes_name_the_option_of_a_bad_duration_and_refuse_unknown_fields() -> None:
    with pytest.raises(ConfigError, match="--budget 'soon' is not a duration"):
        ops.changes({"budget_ms": "soon"})
    with pytest.raises(ConfigError, match="'retries' is not a policy field"):
        ops.changes({"retries": 3})


def test_a_change_merges_into_the_scopes_own_record(control_topic: list[Control]) -> None:
    first = ops.publish("demo.echo", {"budget_ms": 120_000}, by="tester", names=NAMES, tiers=TIERS,
                        kafka=KafkaSettings())
    second = ops.publish("demo.echo", {"max_attempts": 3}, by="tester", names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    assert [r.key for r in control_topic] == ["POLICY:demo.echo", "POLICY:demo.echo"]
    assert first.record.policy is not None and first.record.policy.max_attempts is None
    policy = second.record.policy
    assert policy is not None and (policy.budget_ms, policy.max_attempts) == (120_000, 3)
    assert second.changes == {"max_attempts": 3} and second.record.updated_by == "tester"
    fields = second.report["fields"]
    assert second.report["scope"] == "demo.echo"
    assert (fields["budget_ms"]["value"], fields["budget_ms"]["from"]) == (120_000, "demo.echo")
    assert fields["delivery_timeout_ms"]["from"] == "default"


def test_publishing_nothing_is_refused(control_topic: list[Control]) -> None:
    with pytest.raises(ConfigError, match="give at least one field"):
        ops.publish("*", {}, by="t", names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    assert control_topic == []


def test_show_lists_every_scope_with_its_own_record_after_the_default(control_topic: list[Control]) -> None:
    for scope in ("z.last", "a.first", "*"):
        ops.publish(scope, {"max_attempts": 2}, by="t", names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    assert [r["scope"] for r in ops.show(names=NAMES, tiers=TIERS, kafka=KafkaSettings())] == ["*", "a.first", "z.last"]
    [one] = ops.show(names=NAMES, tiers=TIERS, capability="other.cap", kafka=KafkaSettings())
    assert (one["scope"], one["fields"]["max_attempts"]["from"]) == ("other.cap", "*")


def test_a_warning_comes_with_a_contradicting_policy(control_topic: list[Control]) -> None:
    done = ops.publish("*", {"backoff_base_ms": 5_000, "backoff_max_ms": 1_000}, by="t", names=NAMES, tiers=TIERS,
                       kafka=KafkaSettings())
    assert done.report["warnings"]


def test_the_scope_is_a_capability_or_every_capability() -> None:
    assert (ops.scope_of(None), ops.scope_of(""), ops.scope_of("demo.echo")) == ("*", "*", "demo.echo")
    with pytest.raises(InvalidName):
        ops.scope_of("Not A Capability")


def test_text_fields_parse_by_unit_and_a_bad_one_names_its_field() -> None:
    assert ops.from_text({"max_attempts": " 4 ", "delivery_timeout_ms": "7s", "handoff": "true", "budget_ms": "",
                          "scope": "demo.echo"}) == {"max_attempts": 4, "delivery_timeout_ms": 7_000, "handoff": True}
    for given, message in (({"max_attempts": "three"}, "max_attempts 'three' is not a whole number"),
                           ({"handoff": "maybe"}, "handoff 'maybe' is not true or false"),
                           ({"budget_ms": "7 parsecs"}, "--budget '7 parsecs' is not a duration")):
        with pytest.raises(ConfigError, match=message):
            ops.from_text(given)


def test_a_preview_shows_the_diff_and_the_warnings_after_and_publishes_nothing(control_topic: list[Control]) -> None:
    ops.publish("demo.echo", {"max_attempts": 3}, by="t", names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    seen = ops.preview("demo.echo", {"max_attempts": 4, "delivery_timeout_ms": 7_000, "budget_ms": 60_000,
                                     "backoff_base_ms": 5_000, "backoff_max_ms": 1_000},
                       names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    diff = {d["field"]: (d["before"], d["after"]) for d in seen["diff"]}
    assert diff["max_attempts"] == ("3", "4") and diff["delivery_timeout_ms"][1] == "7s"
    assert "budget_ms" in diff and any("below backoff base" in w for w in seen["warnings"])
    assert not any("below backoff base" in w for w in seen["warnings_before"])
    assert len(control_topic) == 1  # only the first publish
    with pytest.raises(ConfigError, match="give at least one field"):
        ops.preview("demo.echo", {}, names=NAMES, tiers=TIERS, kafka=KafkaSettings())
    assert ops.preview("demo.echo", {"max_attempts": 3}, names=NAMES, tiers=TIERS, kafka=KafkaSettings())[
        "diff"] == []


@pytest.fixture
def known(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The capabilities agents register or that have a topic (reach.ops.policy.known_capabilities), in memory."""
    found = {"demo.flaky", "demo.echo", "a", "b", "c", "d", "e"}
    monkeypatch.setattr(ops, "known_capabilities", lambda **_kw: found)
    return found


def set_fallback(scope: str, target: str) -> ops.Published:
    return ops.publish(scope, ops.changes({"fallback": target}), by="t", names=NAMES, tiers=TIERS,
                       kafka=KafkaSettings())


def test_a_fallback_is_published_shown_and_cleared(control_topic: list[Control], known: set[str]) -> None:
    done = set_fallback("demo.flaky", "demo.echo")
    assert done.record.policy is not None and done.record.policy.fallback == "demo.echo"
    assert (done.report["fields"]["fallback"]["shown"], done.report["fields"]["fallback"]["from"]) == (
        "demo.echo", "demo.flaky")
    cleared = set_fallback("demo.flaky", "none")
    assert cleared.record.policy is not None and cleared.record.policy.fallback is None
    assert cleared.report["fields"]["fallback"]["shown"] == "-"


def test_an_unknown_fallback_is_refused_and_nothing_is_published(control_topic: list[Control], known: set[str]) -> None:
    with pytest.raises(ConfigError, match="'demo.nobody' is not a capability any agent registers and has no topic"):
        set_fallback("demo.flaky", "demo.nobody")
    with pytest.raises(InvalidName):
        ops.changes({"fallback": "Not A Capability"})
    with pytest.raises(ConfigError, match="a fallback is set per capability"):
        set_fallback("*", "demo.echo")
    assert control_topic == []


def test_a_fallback_that_loops_or_runs_too_long_is_refused(control_topic: list[Control], known: set[str]) -> None:
    set_fallback("a", "b")
    with pytest.raises(ConfigError, match=r"fallback b -> a refused: the fallbacks loop: b -> a -> b"):
        set_fallback("b", "a")
    with pytest.raises(ConfigError, match="the fallbacks loop: demo.echo -> demo.echo"):
        set_fallback("demo.echo", "demo.echo")
    set_fallback("b", "c")
    set_fallback("c", "d")
    with pytest.raises(ConfigError, match="the fallback chain e -> a -> b -> c -> d is longer than 3 hops"):
        set_fallback("e", "a")
    assert [r.key for r in control_topic] == ["POLICY:a", "POLICY:b", "POLICY:c"]
