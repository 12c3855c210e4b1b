"""Server-Sent Events of a handler's progress and partial results: each chunk once, before the ending."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.gateway.fakes import Fakes, signed_get
from tests.unit.gateway.test_events import client, events, row


def with_progress(status: str, steps: list[str], chunks: list[tuple[int, str]], fraction: float) -> dict[str, Any]:
    body = row(status, *steps)
    body["progress"] = {"attempt": 1, "fraction": fraction, "note": None, "at": 1, "next_seq": len(chunks),
                        "dropped": 0,
                        "chunks": [{"seq": s, "kind": "text", "data": d, "append": True} for s, d in chunks]}
    return body


def test_chunks_and_progress_stream_in_order_then_the_terminal_entry() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [
        with_progress("STARTED", ["ROUTED", "STARTED"], [(0, "Once ")], 0.5),
        with_progress("STARTED", ["ROUTED", "STARTED"], [(0, "Once "), (1, "upon")], 0.5),
        with_progress("COMPLETED", ["ROUTED", "STARTED", "COMPLETED"], [(0, "Once "), (1, "upon"), (2, " a time")],
                      1.0),
    ]
    got = events(signed_get(client(fakes), "/v1/messages/m1/events").text)
    kinds = [e for _, e, _ in got]
    assert kinds == ["progress", "chunk", "receipt", "receipt", "chunk", "progress", "chunk", "terminal"]
    chunks = [json.loads(d) for _, e, d in got if e == "chunk"]
    assert [c["data"] for c in chunks] == ["Once ", "upon", " a time"] and [c["seq"] for c in chunks] == [0, 1, 2]
    assert all(i == "" for i, e, _ in got if e in ("chunk", "progress"))  # no id: Last-Event-ID stays the timeline's


def test_the_next_turn_of_a_conversation_streams_its_chunks_from_the_first() -> None:
    """A multi-turn message's next turn is the next generation: its attempt 1 numbers its chunks from 0 again."""
    fakes = Fakes()
    first = with_progress("INPUT_REQUIRED", ["ROUTED", "STARTED", "INPUT_REQUIRED"], [(0, "Hmm, "), (1, "who?")], 1.0)
    answered = with_progress("COMPLETED", ["ROUTED", "STARTED", "INPUT_REQUIRED", "ROUTED", "STARTED", "COMPLETED"],
                             [(0, "Hello"), (1, ", Ada")], 1.0)
    answered["generation"] = 1
    fakes.status.rows["m1"] = [first, first, answered]
    got = events(signed_get(client(fakes), "/v1/messages/m1/events").text)
    assert [json.loads(d)["data"] for _, e, d in got if e == "chunk"] == ["Hmm, ", "who?", "Hello", ", Ada"]
    assert got[-1][1] == "terminal"
