"""What an httpx exception means for a send: every transport failure is retryable, with a clear reason."""

from __future__ import annotations

import httpx

from reach.channels.provider import Failure, FailureKind
from reach.core.redact import redact


def transport_failure(exc: httpx.HTTPError, endpoint: str) -> Failure:
    """A timeout, a refused connection, a TLS failure: the provider may answer next time. The reason names the
    endpoint without its credentials (reach/core/redact.py)."""
    if isinstance(exc, httpx.TimeoutException):
        reason = f"{endpoint} did not answer in time ({type(exc).__name__})"
        return Failure(FailureKind.RETRYABLE, "TIMEOUT", redact(reason)[:500])
    if isinstance(exc, httpx.ConnectError):
        return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", redact(f"cannot connect to {endpoint}: {exc}")[:500])
    return Failure(FailureKind.RETRYABLE, "TRANSPORT_ERROR", redact(f"{endpoint}: {type(exc).__name__}: {exc}")[:500])
