"""The status table after a mixed run: HTTP rows and traces, recovery from the changelog in a fresh
worker, metrics that agree with the table, and receipts SQL that matches the run's known counts."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from reach.client import Client
from reach.envelopes import new_id
from tests.integration.agent_support import reach_cli, spawn, wait_for
from tests.integration.stream_app import StreamApp

QUERIES = Path(__file__).resolve().parents[2] / "docs" / "queries"


def sql(query_file: str) -> list[dict[str, object]]:
    out = reach_cli("receipts", "sql", "-f", str(QUERIES / query_file), "--format", "json")
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, object]] = json.loads(out.stdout)
    return rows


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if match and ",".join(sorted(match[1].split(","))) == want:
            return float(match[2])
    return 0.0


def test_mixed_run_rows_traces_recovery_metrics_and_sql(namespace: str, stream_app: StreamApp) -> None:
    agents: list[subprocess.Popen[bytes]] = [spawn("examples.echo_agent:agent"), spawn("examples.flaky_agent:agent")]
    try:
        wait_for(lambda: sum(a["state"] == "READY" for a in stream_app.get("/agents")) == 2, 60, "two agents READY")
        trace = new_id()
        with Client() as client:
            sent = {
                "completed": client.send("demo.echo", {"n": 1}, trace_id=trace),
                "retried": client.send("demo.flaky", {"fail_times": 1}, trace_id=trace),
                "failed": client.send("demo.flaky", {"business_error": True}, trace_id=trace),
                "dead": client.send("demo.flaky", {"fail_times": 99}, max_attempts=2),
                "unroutable": client.send("demo.nobody", {"n": 2}),
            }
        want = {"completed": "COMPLETED", "retried": "COMPLETED", "failed": "FAILED", "dead": "DEAD_LETTERED",
                "unroutable": "UNROUTABLE"}
        rows = wait_for(lambda: (lambda r: r if all(r[k].get("status") == want[k] for k in want) else None)(
            {k: stream_app.get(f"/messages/{m}") for k, m in sent.items()}), 60, "every row terminal")
        assert 'agentreach_agents{agent_id="agent://demo/echo",state="READY"} 1.0' in stream_app.text("/metrics")
    finally:
        for proc in agents:
            proc.terminate()
        for proc in agents:
            proc.wait(60)

    timeline = [s["status"] for s in rows["retried"]["timeline"]]
    assert timeline[:1] == ["ROUTED"] and timeline[-1] == "COMPLETED" and "RETRY_SCHEDULED" in timeline
    assert rows["retried"]["attempt"] == 2 and rows["retried"]["result"] == '{"fail_times":1}'
    assert rows["failed"]["last_error"]["code"] == "BAD_REQUEST"
    assert rows["dead"]["last_error"]["code"] == "RETRIES_EXHAUSTED"
    assert stream_app.get("/messages/01NOSUCHMESSAGE")["_status"] == 404
    assert set(stream_app.get(f"/traces/{trace}")["message_ids"]) == {sent["completed"], sent["retried"],
                                                                      sent["failed"]}
    assert stream_app.get(f"/traces/{new_id()}")["_status"] == 404
    status_cli = reach_cli("status", sent["failed"])
    assert status_cli.returncode == 1 and "FAILED" in status_cli.stdout
    assert reach_cli("status", sent["completed"]).returncode == 0

    # metrics agree with the table
    text = stream_app.text("/metrics")
    assert metric(text, "agentreach_messages_terminal_total", capability="demo.flaky", status="COMPLETED") == 1
    assert metric(text, "agentreach_messages_terminal_total", capability="demo.flaky", status="DEAD_LETTERED") == 1
    assert metric(text, "agentreach_completed_total", capability="demo.flaky", first_attempt="false") == 1
    assert metric(text, "agentreach_completed_total", capability="demo.echo", first_attempt="true") == 1
    assert metric(text, "agentreach_dead_letters_total", capability="demo.flaky", reason="RETRIES_EXHAUSTED") == 1
    assert metric(text, "agentreach_retries_scheduled_total", capability="demo.flaky") == 2  # retried 1 + dead 1
    assert "agentreach_delivery_latency_seconds_bucket" in text and "agentreach_route_candidates_bucket" in text
    lag = wait_for(lambda: [line for line in stream_app.text("/metrics").splitlines()
                            if line.startswith("agentreach_consumer_lag_messages{")], 40, "consumer lag gauges")
    assert any(f'topic="{namespace}.receipts"' in line for line in lag)

    # receipts SQL answers the documented queries with the run's counts
    success = {r["capability"]: r for r in sql("success_rate.sql")}
    assert success["demo.flaky"]["messages"] == 3 and success["demo.flaky"]["success_rate"] == round(1 / 3, 4)
    assert success["demo.flaky"]["first_attempt_success_rate"] == 0
    assert success["demo.echo"]["success_rate"] == 1.0
    assert {(r["capability"], r["reason"], r["dead_letters"]) for r in sql("dead_letters.sql")} == {
        ("demo.flaky", "RETRIES_EXHAUSTED", 1)}
    retry = {r["capability"]: r for r in sql("retry_rate.sql")}
    assert retry["demo.flaky"]["retried"] == 2
    degraded = {r["capability"]: r for r in sql("degradation.sql")}
    assert degraded["demo.nobody"]["degradation_rate"] == 1.0
    latency = {r["capability"]: r for r in sql("latency.sql")}
    assert latency["demo.echo"]["delivery_p50_ms"] is not None

    # a fresh worker with empty local state recovers every row from the changelog, identical
    stream_app.kill()
    fresh = StreamApp(stream_app.log_dir)
    fresh.start()
    try:
        again = wait_for(lambda: (lambda r: r if all(r[k].get("status") == want[k] for k in want) else None)(
            {k: fresh.get(f"/messages/{m}") for k, m in sent.items()}), 60, "rows recovered")
        assert again == rows
    finally:
        fresh.stop()


def test_terminal_rows_are_tombstoned_after_the_retention(namespace: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_STATUS_RETENTION", "3")
    app = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(app.port))
    app.start()
    try:
        with Client() as client:
            mid = client.send("demo.nobody", {"n": 1})  # ends UNROUTABLE at once
        wait_for(lambda: app.get(f"/messages/{mid}").get("status") == "UNROUTABLE", 30, "UNROUTABLE row")
        wait_for(lambda: app.get(f"/messages/{mid}").get("_status") == 404, 30, "the row tombstoned")
    finally:
        app.stop()
