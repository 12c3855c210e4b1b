"""A session's snapshot written back (`ctx.session`, docs/decisions/0076).

A request of a session (`routing.session_key`) carries the session's snapshot in `Envelope.session_snapshot`: the
JSON object its handlers last wrote back, put there by the router whichever instance gets the request (or what the
caller sent, until a handler wrote one). A handler reads it as `ctx.session` (a dict; {} when there is none, or
when the text is not a JSON object: `ctx.session_snapshot` still has the text) and changes it in place or assigns a
new dict. When the run completes and the snapshot changed, the agent records it on the compacted sessions topic
(keyed like the router's affinity records), acknowledged before the input offset is committed; every router reads
it and the next request of the session carries it.

Checked when the run ends: compact JSON of at most MAX_SNAPSHOT_BYTES, else the run FAILS (`INVALID_OUTPUT`,
`SESSION_TOO_LARGE` or `SESSION_NOT_JSON`) with the reason; nothing is written for a run that does not complete.
A request without a session_key has no session to write to, and a subscriber's run (a fan-out delivery or a
notification, which carry the session's snapshot to read) does not write it: a changed `ctx.session` is then logged
and dropped."""

from __future__ import annotations

import json
import logging
from concurrent.futures import Future
from typing import Any

from reach.agent import outcomes
from reach.agent.outcomes import Outcome, Verdict
from reach.core import fanout
from reach.core.sessionmap import MAX_SNAPSHOT_BYTES, encode, scoped
from reach.envelopes import now_ms
from reach.kafka.types import Message
from reach.records import Envelope

log = logging.getLogger("reach.agent")


def read(text: str | None) -> dict[str, Any]:
    """The snapshot as a handler sees it: the JSON object `text` holds, else {}."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dumps(snapshot: dict[str, Any]) -> str:
    """The snapshot's text (compact, keys sorted: one snapshot, one text); TypeError/ValueError when not JSON."""
    return json.dumps(snapshot, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def checked(envelope: Envelope, snapshot: dict[str, Any] | None, verdict: Verdict) -> tuple[Verdict, str | None]:
    """The run's verdict and the snapshot text to write back (None: nothing changed, or nothing to write). A
    completed run whose snapshot is not JSON or is too large FAILS with the reason instead."""
    if snapshot is None or verdict.outcome is not Outcome.COMPLETE:
        return verdict, None
    try:
        text = dumps(snapshot)
    except (TypeError, ValueError, RecursionError) as exc:
        return outcomes.failed("INVALID_OUTPUT", "SESSION_NOT_JSON", f"ctx.session is not JSON: {exc}"[:1000]), None
    size = len(text.encode())
    if size > MAX_SNAPSHOT_BYTES:
        return outcomes.failed("INVALID_OUTPUT", "SESSION_TOO_LARGE", (
            f"ctx.session takes {size:,} bytes as JSON; a session snapshot holds at most {MAX_SNAPSHOT_BYTES:,}. "
            "Keep the session's state small (ids, a summary) and store the rest elsewhere with a reference in it.")), \
            None
    if text == _canonical(envelope.session_snapshot):
        return verdict, None
    if not envelope.routing.session_key:
        log.warning("%s: ctx.session changed but the request has no session_key; nothing is written back",
                    envelope.message_id)
        return verdict, None
    if _observing(envelope):
        log.warning("%s: ctx.session changed in a subscriber's delivery or notification; a subscriber reads the "
                    "session, its handlers write it: nothing is written back", envelope.message_id)
        return verdict, None
    return verdict, text


def _observing(envelope: Envelope) -> bool:
    """Whether this run is a subscriber's: a fan-out delivery or a notification the router derived."""
    headers = envelope.headers
    return (fanout.verified_parent(envelope.message_id, envelope.to_agent, headers.get(fanout.OF_HEADER)) is not None
            or fanout.notified_of(envelope.message_id, envelope.to_agent, headers.get(fanout.NOTIFY_HEADER))
            is not None)


def record(envelope: Envelope, instance_id: str, text: str) -> tuple[str, bytes]:
    """The sessions topic record (key, value) of a snapshot written back by `instance_id`: it also says the session
    was last seen there, now."""
    at = now_ms()
    key = scoped(envelope.tenant, envelope.routing.session_key) or ""
    return key, encode(instance_id, at, envelope.tenant, snapshot=text, snapshot_at=at)


def write_back(send: Any, topic: str | None, envelope: Envelope, instance_id: str,
               text: str | None) -> list[Future[Message]]:
    """The acknowledgement of the snapshot's record ([] when there is nothing to write or no sessions topic)."""
    if text is None:
        return []
    if topic is None:
        log.warning("%s: the namespace has no sessions topic; ctx.session is not written back (run `reach topics "
                    "apply`)", envelope.message_id)
        return []
    key, value = record(envelope, instance_id, text)
    return [send(topic, key, value)]


def _canonical(text: str | None) -> str | None:
    """The snapshot the handler started from, as `dumps` writes it (None: one `dumps` cannot write)."""
    try:
        return dumps(read(text))
    except ValueError:
        return None
