"""What a handler may return or raise to say how its step ended (control flow, not failures)."""

from __future__ import annotations

from datetime import timedelta


class NoData:
    """Return this (or the class itself) when the step succeeded but has nothing to report."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail


class Retry(Exception):
    """Raise (or return) to ask for another attempt, optionally not before `after` (seconds)."""

    def __init__(self, after: float | timedelta | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        seconds = after.total_seconds() if isinstance(after, timedelta) else after
        self.after_ms = None if seconds is None else max(0, int(seconds * 1000))
        self.reason = reason


class Reject(Exception):
    """Raise when the request itself is faulty; it is REJECTED and never retried."""

    def __init__(self, reason: str, code: str = "REJECTED") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class BusinessError(Exception):
    """A definite, non-retryable failure with a stable code (FAILED, kind BUSINESS)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message or code


class Canceled(Exception):
    """Raise after seeing `ctx.cancelled`: the message ends CANCELED (terminal, never retried)."""

    def __init__(self, reason: str = "the caller cancelled it while it ran") -> None:
        super().__init__(reason)
        self.reason = reason


class TransientError(Exception):
    """A failure that may pass on another attempt (ATTEMPT_FAILED, kind TRANSIENT)."""

    def __init__(self, message: str = "transient failure", *, code: str = "TRANSIENT",
                 retry_after: float | None = None, kind: str = "TRANSIENT") -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind  # DESTINATION: the place the agent sends to failed, not the agent (a channel's receiver)
        self.message = message
        self.retry_after_ms = None if retry_after is None else max(0, int(retry_after * 1000))
