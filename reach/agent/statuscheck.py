"""Asking the stream app's status table whether a message already COMPLETED (the durable check)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from reach.errors import ReachError
from reach.webclient import NotFound, get_json

log = logging.getLogger("reach.agent")


@dataclass(frozen=True)
class AlreadyCompleted:
    """The status table's row says COMPLETED for this generation; `result` as its terminal receipt carried it."""

    result: bytes | None


class StatusCheck:
    """`completed(id, generation)`: AlreadyCompleted, or None when not completed or unknown (blocking)."""

    def __init__(self, base_url: str, *, auth: Mapping[str, str], timeout_s: float = 2.0) -> None:
        self._base_url = base_url
        self._auth = auth
        self._timeout_s = timeout_s

    def completed(self, message_id: str, generation: int) -> AlreadyCompleted | None:
        try:
            row = get_json(self._base_url, f"/messages/{quote(message_id, safe='')}", timeout=self._timeout_s,
                           auth=self._auth)
        except NotFound:
            return None
        except (ReachError, ValueError) as exc:  # unreachable, an error answer, or not JSON: run it (at least once)
            log.warning("the status view at %s cannot answer for %s (%s)", self._base_url, message_id, exc)
            return None
        if row.get("generation") != generation or row.get("status") != "COMPLETED":
            return None
        result = row.get("result")
        return AlreadyCompleted(result.encode() if isinstance(result, str) else None)
