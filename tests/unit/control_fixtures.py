"""The control topic in memory: what reach.control.publish publishes, the next reach.control.read_control gives
back (for the use cases of reach.ops and the interfaces over them)."""

from __future__ import annotations

from typing import Any

import pytest

from reach import control
from reach.core.views.controlview import ControlView
from reach.records import Control


def memory_control(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    """Every record published, in order (a test may append records itself); reads fold them into a view."""
    published: list[Control] = []

    def read_control(**_kw: Any) -> ControlView:
        view = ControlView()
        for record in published:
            view.apply(record.key, record)
        return view

    monkeypatch.setattr(control, "read_control", read_control)
    monkeypatch.setattr(control, "publish", lambda record, **_kw: published.append(record))
    return published
