"""Which receipts are calls, and which failures count against the instance."""

from __future__ import annotations

import pytest

from reach.core.breaker import Outcome
from reach.core.healthmodel.calls import call_of
from tests.unit.core.healthmodel.support import receipt


def test_completed_is_a_success_with_its_run_time() -> None:
    found = call_of(receipt("COMPLETED", run_ms=42, at=7))
    assert found is not None
    assert (found.outcome, found.run_ms, found.at, found.instance_id) == (Outcome.SUCCESS, 42, 7, "i-1")


@pytest.mark.parametrize(("status", "kind", "code", "outcome"), [
    ("ATTEMPT_FAILED", "TRANSIENT", "SICK", Outcome.FAILURE),
    ("ATTEMPT_FAILED", "TIMEOUT", "EXECUTION_TIMEOUT", Outcome.FAILURE),
    ("ATTEMPT_FAILED", "TRANSIENT", "RATE_LIMITED", Outcome.OVERLOAD),
    ("ATTEMPT_FAILED", "TRANSIENT", "429", Outcome.OVERLOAD),
    ("ATTEMPT_FAILED", "OVERLOAD", "OVERLOAD", Outcome.OVERLOAD),
    ("FAILED", "INVALID_OUTPUT", "OUTPUT_SCHEMA", Outcome.FAILURE),  # the instance broke its contract
    ("FAILED", "BUSINESS", "BAD_REQUEST", Outcome.SUCCESS),  # it answered: the request was at fault
])
def test_failure_classes(status: str, kind: str, code: str, outcome: Outcome) -> None:
    found = call_of(receipt(status, kind=kind, code=code))
    assert found is not None and found.outcome is outcome
    assert found.timed_out is (kind == "TIMEOUT")


@pytest.mark.parametrize("rec", [
    receipt("ROUTED"), receipt("STARTED"), receipt("RETRY_SCHEDULED", kind="TRANSIENT"),
    receipt("DEAD_LETTERED", kind="TRANSIENT"), receipt("REJECTED", kind="INVALID_INPUT"),
    receipt("FAILED", kind="OVERLOAD", instance=None),  # the router shed it: no instance ran it
    receipt("COMPLETED", run_ms=3) | {"timings": {"cache_hit": 1}},  # a republished result, not a run
])
def test_not_calls(rec: dict[str, object]) -> None:
    assert call_of(rec) is None


def test_a_turn_that_asked_a_question_is_a_successful_call() -> None:
    found = call_of(receipt("INPUT_REQUIRED", run_ms=12))
    assert found is not None and found.outcome is Outcome.SUCCESS and found.run_ms == 12
    assert call_of(receipt("INPUT_REQUIRED") | {"timings": {"cache_hit": 1}}) is None  # republished: not a run
