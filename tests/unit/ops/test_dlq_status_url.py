"""Dead letters (`reach dlq`, the console): a message id from a letter is escaped before it goes into the status URL."""

from __future__ import annotations

from typing import Any

import pytest

from reach.ops import dlq as ops
from reach.settings import ReachSettings
from reach.webclient import NotFound


def test_the_message_id_is_escaped_in_the_status_url(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def get_json(_base: str, path: str, **_: Any) -> Any:
        asked.append(path)
        raise NotFound(path)

    monkeypatch.setattr(ops, "get_json", get_json)
    assert ops.status_row("../admin?x=1#y", settings=ReachSettings()) is None
    assert asked == ["/messages/..%2Fadmin%3Fx%3D1%23y"]
