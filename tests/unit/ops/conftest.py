"""The use cases' seams in memory."""

from __future__ import annotations

import pytest

from reach.records import Control
from tests.unit.control_fixtures import memory_control


@pytest.fixture
def control_topic(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    """The control topic in memory (tests.unit.control_fixtures)."""
    return memory_control(monkeypatch)
