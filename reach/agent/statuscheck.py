"""Asking the stream app's status table whether a message already COMPLETED (the durable check)."""

from __future__ import annotations

import logging
from urllib.parse import quote

from reach.errors import ReachError
from reach.webclient import NotFound, get_json

log = logging.getLogger("reach.agent")


class StatusCheck:
    """`completed(id, generation)`: True, False, or None when the status view cannot answer (blocking)."""

    def __init__(self, base_url: str, *, timeout_s: float = 2.0) -> None:
        self._base_url = base_url
        self._timeout_s = timeout_s

    def completed(self, message_id: str, generation: int) -> bool | None:
        try:
            row = get_json(self._base_url, f"/messages/{quote(message_id, safe='')}", timeout=self._timeout_s)
        except NotFound:
            return False
        except (ReachError, ValueError) as exc:  # unreachable, an error answer, or not JSON
            log.warning("the status view at %s cannot answer for %s (%s)", self._base_url, message_id, exc)
            return None
        return row.get("generation") == generation and row.get("status") == "COMPLETED"
