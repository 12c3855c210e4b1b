"""Errors of the agent SDK (a bad declaration or a broken runtime), all ReachErrors."""

from __future__ import annotations

from reach.errors import ReachError


class AgentError(ReachError):
    """Root of the agent SDK's errors."""


class InvalidDeclaration(AgentError):
    """An agent or capability declaration breaks a rule (name, version, JSON Schema, limits)."""


class DeliveryFailed(AgentError):
    """The broker did not acknowledge a record this worker must publish before committing."""


class RecordRefused(DeliveryFailed):
    """The broker refused one record for what it is (too large, invalid): that record fails, not the worker."""


class InvalidCost(AgentError, ValueError):
    """A handler set `ctx.cost` to something that is not a finite number >= 0."""


class InvalidSession(AgentError, TypeError):
    """A handler set `ctx.session` to something that is not a dict."""


class LeaseLost(AgentError):
    """`ctx.heartbeat()` from a run that no longer holds its message: its lease went to another run, or the run
    already ended (timed out). The handler should stop; nothing it returns now is published."""
