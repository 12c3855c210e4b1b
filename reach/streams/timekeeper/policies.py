"""The control topic's policies for the timekeeper of a status-only worker, kept current by the process's feed.

A worker with the route role hands the timekeeper the router's own control view; one without it folds the
control topic here (reach.streams.feed reads it once for every view of the process), where it used to read the
whole topic again every 10 s."""

from __future__ import annotations

from collections.abc import Mapping

from reach.core.commits import TopicPart
from reach.core.views.controlview import ControlView
from reach.names import Names
from reach.records import Policy
from reach.streams.feed import CONTROL, Feed, Record, Start, Tail, apply_control


class Policies:
    """`policy(capability)` from the control records the feed folded (defaults until it has read them)."""

    def __init__(self, *, names: Names, feed: Feed) -> None:
        self.view = ControlView()
        feed.subscribe("timekeeper policies", [Tail(names.control, Start.BEGINNING, CONTROL)], self._take)

    def _take(self, records: list[Record], _reached: Mapping[TopicPart, int]) -> None:
        for record in records:
            apply_control(self.view, record)

    def policy(self, capability: str) -> Policy:
        return self.view.policy(capability)
