"""The root of every error Agent-Reach raises on purpose."""

from __future__ import annotations


class ReachError(Exception):
    """Base class: a user-facing error says what happened, what was expected, what to do next."""


class ConfigError(ReachError):
    """Settings or a declarative file (topics.yaml) is invalid."""


class InfraUnavailable(ReachError):
    """The broker or Redis cannot be reached (CLI exit code 4)."""


class TopicMissing(ReachError):
    """A topic Agent-Reach needs does not exist (`reach topics apply` creates it)."""


class InvalidName(ReachError):
    """An agent id, capability name or namespace breaks the naming rules."""
