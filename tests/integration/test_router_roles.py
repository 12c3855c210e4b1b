"""`reach router --role route` and `--role status` as two processes: requests complete, replies arrive,
and the routing-only worker answers `GET /messages/{id}` by asking the status worker that owns the row."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach.client import Client
from reach.envelopes import new_id
from tests.integration.agent_support import spawn, wait_for
from tests.integration.stream_app import StreamApp


def test_route_and_status_roles_in_separate_processes(namespace: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    route = StreamApp(tmp_path, role="route")
    status = StreamApp(tmp_path, role="status")
    monkeypatch.setenv("REACH_WEB_PORT", str(route.port))
    route.start()
    status.start()
    echo = spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: any(a["state"] == "READY" for a in route.get("/agents")), 60, "echo READY")
        trace = new_id()
        with Client() as client:
            assert client.invoke("demo.echo", {"n": 1}, timeout_ms=60_000, trace_id=trace) == {"n": 1}
            ids = [client.send("demo.echo", {"n": n}, trace_id=trace) for n in range(2, 5)]
        for worker in (route, status):
            wait_for(lambda w=worker: all(w.get(f"/messages/{m}").get("status") == "COMPLETED" for m in ids), 60,
                     f"rows from the {worker.role} worker")
        assert set(ids) < set(route.get(f"/traces/{trace}")["message_ids"])
        assert route.get("/healthz") == {"ok": True, "router": "running"}
        assert status.get("/healthz") == {"ok": True, "status": "running", "health": "running"}
    finally:
        echo.terminate()
        echo.wait(60)
        status.stop()
        route.stop()
