"""Errors of the stream app."""

from __future__ import annotations

from reach.errors import ReachError


class StreamsError(ReachError):
    """Root of the stream app's errors."""


class DeliveryFailed(StreamsError):
    """The broker refused a record the router produced; the batch is rewound and retried, never committed."""


class NotReady(StreamsError):
    """The router did not finish reading the registry and control topics in time."""
