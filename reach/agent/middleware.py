"""The SDK's seam for cross-cutting behaviour: an ordered list of middleware with no-op hooks (as in Dramatiq)."""

from __future__ import annotations

from dataclasses import dataclass

from reach.agent.outcomes import Verdict
from reach.records import Envelope, Usage


@dataclass(frozen=True)
class Finished:
    """What a middleware sees once a message's outcome receipt is published (acknowledged, unless terminal)."""

    envelope: Envelope
    verdict: Verdict
    raw: bytes | None  # the inbox record's original bytes (dead letters keep them untouched)
    origin: tuple[str, int, int] | None  # inbox topic, partition, offset
    run_ms: int | None  # handler time, None when the handler did not run
    usage: Usage | None = None  # what the run reported (ctx.usage), on a terminal outcome only


class Middleware:
    """Override the hooks you need; each runs in list order, before the message's lease is released."""

    async def after_outcome(self, finished: Finished) -> None:
        """Called for every processed message after its outcome receipt was published; a non-terminal one
        (ATTEMPT_FAILED) is acknowledged first, so what a middleware publishes follows it."""
