"""Console login sessions: the cookie carries a random session id, never the operator's token.

A session maps its id to the operator token it was opened with (checked again on every request, so revoking
the operator ends its sessions), a CSRF token that the pages' logout form sends back, and an absolute expiry.
Logout deletes it on the server, so a copied cookie stops working at once. Held in the memory of one gateway
process (`MemorySessions`): a restart logs every operator out, and several console replicas behind one address
need sticky sessions (issue 28, finding 12; docs/console.md)."""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_TTL_S = 8 * 3600  # a working day; then log in again
MAX_SESSIONS = 10_000  # per process: a login storm cannot grow the table without bound


@dataclass(frozen=True, slots=True)
class Session:
    """One login: its id (the cookie), the token it stands for, its CSRF token and when it ends."""

    session_id: str = field(repr=False)
    token: str = field(repr=False)
    csrf: str = field(repr=False)
    expires_at: float


class MemorySessions:
    """Sessions by id in this process; expired ones are forgotten when met and when the table is full."""

    def __init__(self, *, ttl_s: float = SESSION_TTL_S, clock: Callable[[], float] = time.monotonic,
                 limit: int = MAX_SESSIONS) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._limit = limit
        self._by_id: dict[str, Session] = {}

    def open(self, token: str) -> Session:
        now = self._clock()
        if len(self._by_id) >= self._limit:
            self._by_id = {k: s for k, s in self._by_id.items() if s.expires_at > now}
            while len(self._by_id) >= self._limit:  # still full: the oldest login goes first
                del self._by_id[next(iter(self._by_id))]
        session = Session(session_id=secrets.token_urlsafe(32), token=token, csrf=secrets.token_urlsafe(32),
                          expires_at=now + self.ttl_s)
        self._by_id[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value, or None (unknown, closed or expired)."""
        session = self._by_id.get(session_id or "")
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._by_id[session.session_id]
            return None
        return session

    def close(self, session_id: str | None, csrf: str | None) -> bool:
        """End a session when the CSRF token is its own (constant-time); False, and nothing ended, otherwise."""
        session = self.get(session_id)
        if session is None or not hmac.compare_digest(session.csrf.encode(), (csrf or "").encode()):
            return False
        del self._by_id[session.session_id]
        return True
