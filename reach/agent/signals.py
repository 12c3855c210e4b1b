"""What a handler may return or raise to say how its step ended (control flow, not failures)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reach.core.turns import AUTH, question_of


class NoData:
    """Return this (or the class itself) when the step succeeded but has nothing to report."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail


class NeedsInput:
    """Return this to end the turn with a question for the caller: the message goes to INPUT_REQUIRED and waits
    (no delivery or execution clock, the budget's deadline runs); the caller's answer, checked against `schema`
    (a JSON Schema; None accepts any JSON), starts the next turn, whose handler finds it in `ctx.turns`. A bad
    question or schema raises reach.core.turns.BadQuestion here, in the handler."""

    def __init__(self, question: str, schema: dict[str, Any] | bool | None = None) -> None:
        checked = question_of(question, schema)
        self.question = checked.question
        self.schema_text = checked.schema_text


class NeedsAuth(NeedsInput):
    """Return this to end the turn asking the caller to authorize something first (sign in, approve a charge, grant
    a scope): a NeedsInput whose kind is authorization. The message waits in INPUT_REQUIRED as for NeedsInput and
    the caller answers it the same way; A2A shows the task `auth-required`. `schema` is what the answer must be (a
    token, a grant id, `{"approved": true}` ...); `question` says what to authorize and where (a sign-in URL)."""

    def __init__(self, question: str, schema: dict[str, Any] | bool | None = None) -> None:
        checked = question_of(question, schema, kind=AUTH)
        self.question = checked.question
        self.schema_text = checked.schema_text


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
