"""Unit tests are hermetic: no test reaches a Redis or a local stack that happens to run on the machine.

Writers of terminal receipts (router, timekeeper, delay tiers, resolver, handoff desk) open the first-terminal
register on REACH_REDIS_URL or the local stack's Redis by default (reach.terminals); a unit test that wants a
register passes an in-memory one, so state never leaks between tests or runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_ambient_redis(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    monkeypatch.delenv("REACH_REDIS_URL", raising=False)
    home: Path = tmp_path_factory.getbasetemp() / "reach-home"  # no local.json: no local Redis to fall back on
    monkeypatch.setenv("REACH_HOME", str(home))
    yield
