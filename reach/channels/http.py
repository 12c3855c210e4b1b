"""What an httpx exception means for a send: every transport failure is retryable, with a clear reason."""

from __future__ import annotations

import httpx

from reach.channels.provider import Failure, FailureKind


def transport_failure(exc: httpx.HTTPError, endpoint: str) -> Failure:
    """A timeout, a refused connection, a TLS failure: the provider may answer next time."""
    if isinstance(exc, httpx.TimeoutException):
        return Failure(FailureKind.RETRYABLE, "TIMEOUT", f"{endpoint} did not answer in time ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return Failure(FailureKind.RETRYABLE, "CONNECT_FAILED", f"cannot connect to {endpoint}: {exc}"[:500])
    return Failure(FailureKind.RETRYABLE, "TRANSPORT_ERROR", f"{endpoint}: {type(exc).__name__}: {exc}"[:500])
