"""The POLICY field list: where each effective value comes from, durations, and the consistency check of tiers,
backoff and budget (a tier no backoff reaches, a budget shorter than the attempts' backoffs)."""

from __future__ import annotations

import pytest

from reach import policyfields
from reach.control import policy_record
from reach.core.views.controlview import ControlView
from reach.errors import ConfigError
from reach.records import Policy

TIERS = ["1s", "10s", "60s"]


def test_each_value_says_whether_it_comes_from_the_capability_the_star_scope_or_the_default() -> None:
    view = ControlView()
    for record in (policy_record(Policy(max_attempts=2, budget_ms=90_000), scope="*"),
                   policy_record(Policy(budget_ms=10_000), scope="demo.echo")):
        view.apply(record.key, record)
    rows = {spec.name: (value, source) for spec, value, source in
            policyfields.effective(view.policy("demo.echo"), view.policy_sources("demo.echo"))}
    assert rows["budget_ms"] == (10_000, "demo.echo")
    assert rows["max_attempts"] == (2, "*")
    assert rows["backoff_base_ms"] == (200, "default")
    assert rows["idempotency_window_ms"] == (24 * 3600 * 1000, "default")


@pytest.mark.parametrize(("text", "ms"), [("200ms", 200), ("5s", 5_000), ("2m", 120_000), ("24h", 86_400_000),
                                          ("750", 750)])
def test_durations(text: str, ms: int) -> None:
    assert policyfields.parse_duration(text, option="--budget") == ms


def test_a_bad_duration_says_what_is_expected() -> None:
    with pytest.raises(ConfigError, match="--budget 'soon' is not a duration: expected e.g. 200ms"):
        policyfields.parse_duration("soon", option="--budget")


def test_the_defaults_are_consistent_with_the_shipped_tiers() -> None:
    assert policyfields.check(Policy(), TIERS) == []


def test_a_tier_longer_than_any_reachable_backoff_is_a_warning() -> None:
    [warning] = policyfields.check(Policy(backoff_max_ms=2_000), TIERS)
    assert warning.startswith("retry tier 60s is longer than any reachable backoff (at most 2s")


def test_a_budget_shorter_than_the_backoffs_is_a_warning() -> None:
    [warning] = policyfields.check(Policy(backoff_base_ms=1_000, budget_ms=3_000), TIERS)
    assert "budget 3s ends before the backoffs of 4 attempts (only 2 fit" in warning


def test_a_backoff_max_below_its_base_is_a_warning() -> None:
    warnings = policyfields.check(Policy(backoff_base_ms=5_000, backoff_max_ms=1_000), TIERS)
    assert any("below backoff base" in w for w in warnings)


def test_every_policy_field_is_listed_once() -> None:
    assert sorted(f.name for f in policyfields.FIELDS) == sorted(Policy.model_fields)
