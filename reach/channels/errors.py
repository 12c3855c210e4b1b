"""Errors of the channels package, all ReachErrors."""

from __future__ import annotations

from reach.core.redact import redact
from reach.errors import ReachError


class ChannelError(ReachError):
    """Root of the channel errors."""


class BadCallback(ChannelError, ValueError):
    """A callback spec that cannot be acted on (syntax, unknown channel, bad endpoint, bad JSONPath); its text
    never carries an endpoint's credentials (it ends up in receipts and gateway answers)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class ChannelMisconfigured(ChannelError):
    """A channel agent cannot start: its provider settings are missing or wrong."""
