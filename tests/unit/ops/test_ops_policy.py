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
