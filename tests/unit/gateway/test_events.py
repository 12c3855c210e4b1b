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


def test_an_app_holds_at_most_sse_per_app_streams_open_at_once() -> None:
    """Issue 28, finding 4: nothing bounded the streams one app could hold open (each polls 4x/s for 600 s)."""
    import asyncio

    from tests.unit.gateway.fakes import sign

    fakes = Fakes()
    fakes.status.rows["m1"] = [row("ROUTED", "ACCEPTED", "ROUTED")]  # never terminal: a stream ends at sse_max
    gateway = build_gateway(fakes.deps(), HttpSettings(sse_poll=0.01, sse_find=0.05, sse_max=0.3, sse_per_app=1),
                            closure=ClosureSettings())
    path = "/v1/messages/m1/events"

    async def get(started: asyncio.Event | None = None) -> int:
        sent: list[dict[str, Any]] = []
        never = asyncio.Event()
        first = True

        async def receive() -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.start" and started is not None:
                started.set()

        headers = [(b"reach-key", b"key1"),
                   (b"reach-signature", sign(b"secret-1", b"", method="GET", target=path).encode())]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": headers, "server": ("testserver", 80), "client": ("testclient", 1)}
        await gateway(scope, receive, send)
        return int(next(m for m in sent if m["type"] == "http.response.start")["status"])

    async def scenario() -> tuple[int, int, int]:
        opened = asyncio.Event()
        first = asyncio.create_task(get(opened))
        await asyncio.wait_for(opened.wait(), 5)
        second = await get()  # the first still streams
        done = await asyncio.wait_for(first, 5)  # it ends at sse_max and gives its slot back
        third = await get()
        return done, second, third

    assert asyncio.run(scenario()) == (200, 429, 200)


def test_reads_take_the_apps_read_quota_not_its_request_quota() -> None:
    """Issue 28, finding 4: GET and SSE took no quota at all."""
    from tests.unit.gateway.fakes import FakeQuotas

    fakes = Fakes(quotas=FakeQuotas(read_rate=0.001, read_burst=2))
    fakes.status.rows["m1"] = [row("COMPLETED", "ACCEPTED", "COMPLETED")]
    gw = client(fakes)
    assert [signed_get(gw, "/v1/messages/m1").status_code for _ in range(2)] == [200, 200]
    for path in ("/v1/messages/m1", "/v1/messages/m1/events", "/v1/traces/t1"):
        refused = signed_get(gw, path)
        assert refused.status_code == 429 and refused.json()["error"] == "quota_exceeded", path
        assert "read quota" in refused.json()["message"] and int(refused.headers["Retry-After"]) >= 1
    assert fakes.quotas.taken == 0, "reads never spend the app's request tokens"


def served(child: str) -> dict[str, Any]:
    """m1's row once it ended UNROUTABLE and went on to its fallback `child`."""
    body = row("UNROUTABLE", "ACCEPTED", "UNROUTABLE")
    body["fallback"] = {"capability": "demo.echo", "message_id": child, "note": None}
    return body


def test_an_ending_served_by_the_fallback_streams_on_to_the_childs_terminal() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [served("m1-fb0")]
    child = row("COMPLETED", "ROUTED", "STARTED", "COMPLETED")
    fakes.status.rows["m1-fb0"] = [{**child, "message_id": "m1-fb0"}]
    got = events(signed_get(client(fakes), "/v1/messages/m1/events").text)
    assert [(i, e) for i, e, _ in got] == [("0", "receipt"), ("1", "receipt"), ("", "fallback"), ("2", "receipt"),
                                           ("3", "receipt"), ("4", "terminal")]
    assert '"child":"m1-fb0"' in got[2][2] and '"status":"UNROUTABLE"' in got[2][2]
    resumed = events(signed_get(client(fakes), "/v1/messages/m1/events", headers={"Last-Event-ID": "3"}).text)
    assert [(i, e) for i, e, _ in resumed] == [("", "fallback"), ("4", "terminal")]


def test_a_fallback_that_names_no_child_of_the_message_ends_the_stream_as_before() -> None:
    fakes = Fakes()
    fakes.status.rows["m1"] = [served("other-fb0")]
    fakes.status.rows["other-fb0"] = [{**row("COMPLETED", "COMPLETED"), "message_id": "other-fb0", "tenant": "x"}]
    got = events(signed_get(client(fakes), "/v1/messages/m1/events").text)
    assert [(i, e) for i, e, _ in got] == [("0", "receipt"), ("1", "terminal")]
