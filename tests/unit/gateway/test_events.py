"""Server-Sent Events of a message's timeline: each entry once, the terminal one last, resumable."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes, signed_get


def row(status: str, *steps: str) -> dict[str, Any]:
    return {"message_id": "m1", "status": status, "tenant": "acme",
            "timeline": [{"status": s, "at": i, "generation": 0, "attempt": 1} for i, s in enumerate(steps)]}


def events(text: str) -> list[tuple[str, str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            out.append((fields.get("id", ""), fields["event"], fields["data"]))
    return out


def client(fakes: Fakes, **settings: Any) -> TestClient:
    return TestClient(build_gateway(fakes.deps(), HttpSettings(sse_poll=0.01, sse_find=0.05, **settings),
                                    closure=ClosureSettings()))


def test_the_stream_follows_the_row_and_ends_with_the_terminal_receipt() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [row("ACCEPTED", "ACCEPTED"), row("ROUTED", "ACCEPTED", "ROUTED"),
                               row("COMPLETED", "ACCEPTED", "ROUTED", "STARTED", "COMPLETED")]
    resp = signed_get(client(fakes), "/v1/messages/m1/events")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    got = events(resp.text)
    assert [(i, e) for i, e, _ in got] == [("0", "receipt"), ("1", "receipt"), ("2", "receipt"), ("3", "terminal")]
    assert '"status":"COMPLETED"' in got[-1][2]


def test_last_event_id_resumes_after_that_entry() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [row("COMPLETED", "ACCEPTED", "ROUTED", "COMPLETED")]
    got = events(signed_get(client(fakes), "/v1/messages/m1/events", headers={"Last-Event-ID": "1"}).text)
    assert [(i, e) for i, e, _ in got] == [("2", "terminal")]


def test_an_unknown_message_is_404_after_the_find_window() -> None:
    fakes = Fakes()
    resp = signed_get(client(fakes), "/v1/messages/nope/events")
    assert resp.status_code == 404 and resp.json()["error"] == "not_found"
    assert fakes.status.reads >= 2  # it looked again before giving up


def test_a_stream_that_never_ends_closes_with_a_timeout_event() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [row("ROUTED", "ACCEPTED", "ROUTED")]
    got = events(signed_get(client(fakes, sse_max=0.05), "/v1/messages/m1/events").text)
    assert [e for _, e, _ in got] == ["receipt", "receipt", "timeout"]
