"""Usage reports checked field by field: bad values dropped with a reason, never raised; reports add up."""

from __future__ import annotations

import math

import pytest

from reach.core.usage import MAX_TOKENS, Meter, check_currency, check_report, format_micros, from_result


def test_a_good_report_passes_whole() -> None:
    report = check_report(input_tokens=100, output_tokens=50.0, model="gpt-4o-mini", cost=1_250)
    assert (report.input_tokens, report.output_tokens, report.model, report.cost_micros) == (100, 50, "gpt-4o-mini",
                                                                                           1_250)
    assert report.problems == ()


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, -math.inf, 1.5, True, "100", [1], MAX_TOKENS + 1])
def test_a_bad_token_count_is_dropped_with_a_reason_and_the_rest_kept(bad: object) -> None:
    report = check_report(input_tokens=bad, output_tokens=7, model="m")
    assert report.input_tokens is None and report.output_tokens == 7 and report.model == "m"
    [problem] = report.problems
    assert problem.startswith("input_tokens") and "dropped" in problem


@pytest.mark.parametrize("bad", [-5, math.nan, 10**13, "1.2"])
def test_a_bad_cost_is_dropped(bad: object) -> None:
    report = check_report(cost=bad, input_tokens=1)
    assert report.cost_micros is None and report.input_tokens == 1 and "cost" in report.problems[0]


def test_a_blank_or_huge_model_name_is_dropped() -> None:
    assert check_report(model="  ").model is None
    assert check_report(model="x" * 500).problems


def test_reports_add_up_and_the_last_model_stays() -> None:
    meter = Meter()
    assert meter.usage(currency="USD", source="s") is None  # nothing reported: no usage on the receipt
    meter.add(check_report(input_tokens=10, output_tokens=5, model="a", cost=100))
    meter.add(check_report(input_tokens=1, model="b"))
    meter.add(check_report(input_tokens=-3))  # dropped entirely: changes nothing
    used = meter.usage(currency="EUR", source="gateway:app_1")
    assert used is not None
    assert (used.input_tokens, used.output_tokens, used.model, used.cost_micros) == (11, 5, "b", 100)
    assert (used.currency, used.source, used.tokens) == ("EUR", "gateway:app_1", 16)


def test_usage_without_a_cost_names_no_currency() -> None:
    meter = Meter()
    meter.add(check_report(input_tokens=3))
    used = meter.usage(currency="USD", source=None)
    assert used is not None and used.cost_micros is None and used.currency is None


def test_usage_is_taken_from_a_returned_value_in_either_spelling() -> None:
    ours = from_result({"answer": "x", "usage": {"input_tokens": 100, "output_tokens": 50, "cost": 7}})
    assert ours is not None and (ours.input_tokens, ours.output_tokens, ours.cost_micros) == (100, 50, 7)
    openai = from_result({"model": "gpt-4o", "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
    assert openai is not None and (openai.input_tokens, openai.output_tokens, openai.model) == (9, 4, "gpt-4o")
    assert from_result({"usage": "lots"}) is None
    assert from_result({"usage": {"note": "no counts"}}) is None
    assert from_result([1, 2]) is None and from_result("text") is None


def test_the_currency_is_an_iso_code() -> None:
    assert check_currency(" eur ") == "EUR"
    with pytest.raises(ValueError, match="ISO 4217"):
        check_currency("EURO")
    with pytest.raises(ValueError, match="ISO 4217"):
        check_currency("XYZ")


def test_micros_format_with_two_decimals_at_least() -> None:
    assert [format_micros(m) for m in (0, 1_250_000, 5_000_000, 1_234_567, 10)] == [
        "0.00", "1.25", "5.00", "1.234567", "0.00001"]


def test_an_unknown_reach_currency_stops_the_process_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.errors import ConfigError
    from reach.settings import ReachSettings

    monkeypatch.setenv("REACH_CURRENCY", "XYZ")
    with pytest.raises(ConfigError, match="REACH_CURRENCY='XYZ'.*ISO 4217"):
        ReachSettings()
    monkeypatch.setenv("REACH_CURRENCY", "eur")
    assert ReachSettings().currency == "EUR"
