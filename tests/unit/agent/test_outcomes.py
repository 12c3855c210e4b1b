"""The pure mapping from handler results and exceptions to outcomes and receipt statuses."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reach.agent import BusinessError, NoData, Reject, Retry, TransientError
from reach.agent.outcomes import Outcome, from_exception, from_result, receipt_status
from reach.records import Status, StepStatus


@pytest.mark.parametrize(("result", "outcome"), [
    ({"a": 1}, Outcome.COMPLETE), (None, Outcome.COMPLETE), (b"raw", Outcome.COMPLETE),
    (NoData, Outcome.NO_DATA), (NoData("empty"), Outcome.NO_DATA), (Retry(after=1), Outcome.RETRY),
])
def test_return_values(result: object, outcome: Outcome) -> None:
    assert from_result(result).outcome is outcome


def test_business_error_fails_with_its_code() -> None:
    verdict = from_exception(BusinessError("CREDIT_LIMIT", "over"))
    assert verdict.outcome is Outcome.FAIL
    assert (verdict.error.kind, verdict.error.code, verdict.error.message) == ("BUSINESS", "CREDIT_LIMIT", "over")


@pytest.mark.parametrize(("exc", "kind", "code", "after"), [
    (TransientError("down", code="UPSTREAM", retry_after=1.5), "TRANSIENT", "UPSTREAM", 1500),
    (Retry(after=timedelta(seconds=2)), "TRANSIENT", "RETRY", 2000),
    (Retry(), "TRANSIENT", "RETRY", None),
    (TimeoutError(), "TIMEOUT", "EXECUTION_TIMEOUT", None),
    (KeyError("x"), "TRANSIENT", "UNHANDLED_EXCEPTION", None),
])
def test_retryable_failures(exc: BaseException, kind: str, code: str, after: int | None) -> None:
    verdict = from_exception(exc)
    assert verdict.outcome is Outcome.RETRY
    assert (verdict.error.kind, verdict.error.code, verdict.retry_after_ms) == (kind, code, after)


def test_reject_is_invalid_input() -> None:
    verdict = from_exception(Reject("no such customer", code="UNKNOWN_CUSTOMER"))
    assert verdict.outcome is Outcome.REJECT and verdict.error.kind == "INVALID_INPUT"


@pytest.mark.parametrize(("outcome", "status", "step"), [
    (Outcome.COMPLETE, Status.COMPLETED, StepStatus.OK), (Outcome.NO_DATA, Status.COMPLETED, StepStatus.NO_DATA),
    (Outcome.RETRY, Status.ATTEMPT_FAILED, StepStatus.ERROR), (Outcome.FAIL, Status.FAILED, StepStatus.ERROR),
    (Outcome.REJECT, Status.REJECTED, StepStatus.ERROR),
])
def test_receipt_status(outcome: Outcome, status: Status, step: StepStatus) -> None:
    assert receipt_status(outcome) == (status, step)
    assert status.is_terminal is (outcome is not Outcome.RETRY)
