"""Pure mapping of a handler's return value or exception to an outcome, and of outcomes to receipts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reach.agent.exceptions import LeaseLost
from reach.agent.signals import BusinessError, Canceled, NeedsInput, NoData, Reject, Retry, TransientError
from reach.records import ErrorInfo, Status, StepStatus


class Outcome(StrEnum):
    """How a step ended, as the worker acts on it (uForwarder-style result codes)."""

    COMPLETE = "complete"
    NO_DATA = "no_data"
    RETRY = "retry"
    FAIL = "fail"
    REJECT = "reject"
    CANCEL = "cancel"  # the caller cancelled it (reach.cancels): CANCELED, terminal
    INPUT = "input"  # the handler asked the caller a question (NeedsInput): INPUT_REQUIRED, waits for the answer


@dataclass(frozen=True, slots=True)
class Verdict:
    """An outcome plus what its receipt carries."""

    outcome: Outcome
    value: object = None
    error: ErrorInfo | None = None
    retry_after_ms: int | None = None
    evidence: dict[str, int] | None = None  # receipt timings that explain it (a MAYBE_RAN's attempt, 0075)


_RECEIPT = {
    Outcome.COMPLETE: (Status.COMPLETED, StepStatus.OK),
    Outcome.NO_DATA: (Status.COMPLETED, StepStatus.NO_DATA),
    Outcome.RETRY: (Status.ATTEMPT_FAILED, StepStatus.ERROR),
    Outcome.FAIL: (Status.FAILED, StepStatus.ERROR),
    Outcome.REJECT: (Status.REJECTED, StepStatus.ERROR),
    Outcome.CANCEL: (Status.CANCELED, StepStatus.ERROR),
    Outcome.INPUT: (Status.INPUT_REQUIRED, StepStatus.OK),
}


def receipt_status(outcome: Outcome) -> tuple[Status, StepStatus]:
    """The receipt status and step status an outcome is reported with."""
    return _RECEIPT[outcome]


def from_result(result: object) -> Verdict:
    """Classify a handler's return value (a returned Retry counts as a request to retry)."""
    if result is NoData or isinstance(result, NoData):
        return Verdict(Outcome.NO_DATA)
    if isinstance(result, NeedsInput):
        return Verdict(Outcome.INPUT, value=result)
    if isinstance(result, BaseException):
        return from_exception(result)
    return Verdict(Outcome.COMPLETE, value=result)


def from_exception(exc: BaseException) -> Verdict:
    """Classify what a handler raised; anything unexpected is uncertain, hence retryable."""
    if isinstance(exc, BusinessError):
        return Verdict(Outcome.FAIL, error=ErrorInfo(kind="BUSINESS", code=exc.code, message=exc.message))
    if isinstance(exc, Canceled):
        return canceled(exc.reason)
    if isinstance(exc, Reject):
        return Verdict(Outcome.REJECT, error=ErrorInfo(kind="INVALID_INPUT", code=exc.code, message=exc.reason))
    if isinstance(exc, Retry):
        return Verdict(Outcome.RETRY, error=ErrorInfo(kind="TRANSIENT", code="RETRY", message=exc.reason),
                       retry_after_ms=exc.after_ms)
    if isinstance(exc, TransientError):
        return Verdict(Outcome.RETRY, error=ErrorInfo(kind=exc.kind, code=exc.code, message=exc.message),
                       retry_after_ms=exc.retry_after_ms)
    if isinstance(exc, LeaseLost):  # ctx.heartbeat() after the lease went elsewhere: that run decides
        return Verdict(Outcome.RETRY, error=ErrorInfo(kind="TRANSIENT", code="LEASE_LOST", message=str(exc)[:1000]))
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is the builtin since 3.11
        return Verdict(Outcome.RETRY, error=ErrorInfo(kind="TIMEOUT", code="EXECUTION_TIMEOUT",
                                                      message=str(exc) or "execution timeout exceeded"))
    return Verdict(Outcome.RETRY, error=ErrorInfo(kind="TRANSIENT", code="UNHANDLED_EXCEPTION",
                                                  message=f"{type(exc).__name__}: {exc}"[:1000]))


def rejected(code: str, message: str) -> Verdict:
    """The request is faulty (bad input); the handler is not called."""
    return Verdict(Outcome.REJECT, error=ErrorInfo(kind="INVALID_INPUT", code=code, message=message))


def failed(kind: str, code: str, message: str) -> Verdict:
    """A definite failure found by the worker itself (e.g. output violating its schema)."""
    return Verdict(Outcome.FAIL, error=ErrorInfo(kind=kind, code=code, message=message))


def canceled(message: str) -> Verdict:
    """The caller cancelled the message: before it started (the handler is not called) or while it ran."""
    return Verdict(Outcome.CANCEL, error=ErrorInfo(kind="CANCELED", code="CANCELED", message=message))
