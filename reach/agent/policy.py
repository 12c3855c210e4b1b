"""The control records an instance obeys: its capabilities' POLICY, and a DRAIN or DISABLE of its own instance.

Both come from a ControlFeed, which tails the control topic continuously (a record takes effect within a
poll, about 0.2 s), not from a periodic re-read.
"""

from __future__ import annotations

from enum import StrEnum

from reach.controlfeed import ControlSource
from reach.core.timeouts import effective_execution_timeout_ms
from reach.core.views.controlview import ControlView
from reach.records import InstanceAction, Policy


class Mode(StrEnum):
    """What the operator asks of this instance."""

    RUN = "run"        # consume the inbox as usual (no override, or ENABLE)
    PAUSE = "pause"    # DISABLE: stay registered, finish what it took, read nothing new until ENABLE
    DRAIN = "drain"    # DRAIN: DRAINING, finish in-flight work, deregister, exit


def mode_of(view: ControlView, instance_id: str) -> Mode:
    """The mode the control view sets for `instance_id`."""
    action = view.instance_action(instance_id)
    if action is InstanceAction.DRAIN:
        return Mode.DRAIN
    if action is InstanceAction.DISABLE:
        return Mode.PAUSE
    return Mode.RUN


class AgentControl:
    """`policy(capability)` and `mode()` answer from the feed's current view (thread-safe reads)."""

    def __init__(self, feed: ControlSource, *, instance_id: str) -> None:
        self._feed = feed
        self._instance_id = instance_id

    def start(self) -> None:
        self._feed.start()

    def stop(self) -> None:
        self._feed.stop()

    def policy(self, capability: str) -> Policy:
        return self._feed.view.policy(capability)

    def mode(self) -> Mode:
        return mode_of(self._feed.view, self._instance_id)


def execution_timeout_ms(envelope_ms: int, policy: Policy | None, declared_ms: int) -> int:
    """The run's timeout (reach.core.timeouts.effective_execution_timeout_ms): the agent's declared one, shortened
    by the caller's ask (the envelope's, when set) and by the capability's POLICY cap (when set)."""
    return effective_execution_timeout_ms(declared_ms, envelope_ms, policy.execution_timeout_ms if policy else None)
