"""Errors of `reach demo`."""

from __future__ import annotations

from reach.errors import ReachError


class DemoError(ReachError):
    """A part of the demo did not start or stopped on its own (the message carries the end of its log)."""
