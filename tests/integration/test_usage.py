"""Usage and spend limits on the real broker, Redis and HTTP: an LLM-shaped agent's reported usage on its
receipts, status rows, `reach receipts sql`, its Prometheus counters and the spend counts (exact across a status
worker killed mid-run); a gateway app over its token limit refused 429 budget_exceeded with the reset time."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from cryptography.fernet import Fernet

from examples.llm_agent import COST_MICROS, INPUT_TOKENS, MODEL, OUTPUT_TOKENS
from reach.client import Client
from reach.core.spend import Period, reset_at
from reach.envelopes import now_ms
from reach.spendbook import app_scope, counter_key, tenant_scope
from reach.tooling.local.process import free_port
from tests.integration.agent_support import reach_cli, spawn, wait_for
from tests.integration.stream_app import StreamApp
from tests.integration.test_agent_metrics import scrape
from tests.integration.test_gateway_http import Gateway, create_app

pytestmark = pytest.mark.integration
CALLS = 50  # the count: 5,000 input and 2,500 output tokens in all
TOKENS = INPUT_TOKENS + OUTPUT_TOKENS


@pytest.fixture
def llm_agent(namespace: str) -> Iterator[int]:
    """examples/llm_agent.py as its own process, with its metrics on a port (yielded)."""
    port = free_port()
    proc = spawn("examples.llm_agent:agent", REACH_AGENT_METRICS_PORT=str(port))
    yield port
    proc.terminate()
    proc.wait(60)


def spend(namespace: str, scope: str) -> dict[str, int]:
    client = redis.Redis.from_url(os.environ["REACH_REDIS_URL"])
    try:
        found = client.hgetall(counter_key(namespace, scope, Period.DAY, now_ms()))
    finally:
        client.close()
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in found.items()}


def routable(app: StreamApp) -> None:
    """Wait until the router has the llm agent READY (a request before that would end UNROUTABLE)."""
    def ready() -> bool:
        listed: list[dict[str, Any]] = app.get("/agents")  # type: ignore[assignment]  # a JSON list
        return any(a["agent_id"] == "agent://demo/llm" and a["state"] == "READY" for a in listed)

    wait_for(ready, 60, "the router to see agent://demo/llm READY")


def test_reported_usage_reaches_receipts_rows_sql_metrics_and_spend_counts_once(
        namespace: str, stream_app: StreamApp, llm_agent: int) -> None:
    routable(stream_app)
    with Client() as client:
        ids = []
        for n in range(CALLS):
            envelope = client.envelope("demo.llm", {"prompt": f"p{n}"})
            client.publish(envelope)
            ids.append(envelope.message_id)
            if n == CALLS // 2:  # the status worker (fold and usage counter) dies mid-run, before its commits
                stream_app.kill()
                stream_app.start()
                routable(stream_app)

    def row(mid: str) -> dict[str, Any] | None:
        found = stream_app.get(f"/messages/{mid}")
        return found if found.get("status") == "COMPLETED" else None

    rows = [wait_for(lambda mid=mid: row(mid), 120, f"{mid} COMPLETED") for mid in ids]  # type: ignore[misc]
    assert rows[0]["usage"] == {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS, "model": MODEL,
                                "cost_micros": COST_MICROS, "currency": "USD", "source": "reach-client"}

    # the spend counts: every request once, though the counter re-read what it had not committed
    want = {"tokens": CALLS * TOKENS, "cost": CALLS * COST_MICROS}
    wait_for(lambda: spend(namespace, tenant_scope("default")) == want, 60, f"tenant spend {want}")

    done = reach_cli("receipts", "sql", "-f", "docs/queries/usage_by_capability.sql", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"capability": "demo.llm", "model": MODEL, "requests": CALLS,
                                        "input_tokens": CALLS * INPUT_TOKENS, "output_tokens": CALLS * OUTPUT_TOKENS,
                                        "tokens": CALLS * TOKENS, "cost": CALLS * COST_MICROS / 1e6,
                                        "currency": "USD"}]

    line = ('agentreach_agent_usage_tokens_total{agent_id="agent://demo/llm",capability="demo.llm",'
            f'direction="input",model="{MODEL}"}} {float(CALLS * INPUT_TOKENS)}')
    wait_for(lambda: line in scrape(llm_agent), 30, "the agent's usage counter")


def test_an_app_over_its_token_limit_is_refused_429_budget_exceeded_until_the_day_ends(
        namespace: str, stream_app: StreamApp, llm_agent: int, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    capped = create_app("capped", "--limit-tokens", "1000/day")
    bad = reach_cli("apps", "update", capped["app_id"], "--limit-tokens", "a lot")
    assert bad.returncode == 2 and "is not a limit" in bad.stderr
    gateway = Gateway(tmp_path, {"capped": capped})
    gateway.start()
    try:
        call = {"capability": "demo.llm", "payload": {"prompt": "hi"}, "timeout_ms": 30_000}
        def invoked() -> httpx.Response | None:
            resp = gateway.post("/v1/invoke", call, app="capped")
            return resp if resp.status_code == 200 else None  # 404 until its registry reader has the agent

        first = wait_for(invoked, 60, "the gateway to see the llm agent")
        assert first.json()["status"] == "COMPLETED"
        for _ in range(1000 // TOKENS - 1):  # 6 calls of 150 tokens stay below 1,000
            assert gateway.post("/v1/invoke", call, app="capped").status_code == 200
        envelope = {"capability": "demo.llm", "payload": {"prompt": "more"}}

        def refused() -> Any:
            resp = gateway.post("/v1/envelopes", envelope, app="capped")
            assert resp.status_code in (202, 429), resp.text
            return resp if resp.status_code == 429 else None

        resp = wait_for(refused, 60, "429 once the counted usage reaches the limit", interval=0.3)
        body = resp.json()
        reset = datetime.fromtimestamp(reset_at(Period.DAY, now_ms()) / 1000, UTC).isoformat().replace("+00:00", "Z")
        assert body["error"] == "budget_exceeded" and body["reset_at"] == reset
        assert "tokens limit 1000/day reached" in body["message"]
        assert 0 < int(resp.headers["Retry-After"]) <= 24 * 3600
        assert spend(namespace, app_scope(capped["app_id"]))["tokens"] >= 1000
        warning = f'agentreach_gateway_budget_warning{{app="{capped["app_id"]}",kind="tokens",period="day"}} 1.0'
        assert warning in gateway.http.get("/metrics").text
    finally:
        gateway.stop()


def test_a_tenant_over_its_limit_fails_budget_exceeded_at_the_router_and_is_refused_at_the_door(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_TENANT_LIMITS", json.dumps({"capped": ["tokens=300/day"]}))
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    app = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(app.port))
    app.start()
    agent = spawn("examples.llm_agent:agent")
    gateway = Gateway(tmp_path, {"shop": create_app("shop", "--tenant", "capped")})
    try:
        routable(app)

        def ended(mid: str) -> dict[str, Any] | None:
            found = app.get(f"/messages/{mid}")
            return found if found.get("terminal_at") else None

        with Client() as client:
            sent = [client.envelope("demo.llm", {"prompt": f"p{n}"}, tenant="capped") for n in range(2)]
            for envelope in sent:
                client.publish(envelope)  # straight to Kafka: no gateway in between
            assert [wait_for(lambda e=e: ended(e.message_id), 60, "the tenant's first calls")["status"]  # type: ignore[misc]
                    for e in sent] == ["COMPLETED", "COMPLETED"]
            wait_for(lambda: spend(namespace, tenant_scope("capped")).get("tokens") == 2 * TOKENS, 60,
                     "300 tokens counted for the tenant")

            def one_more() -> dict[str, Any] | None:
                """A request once the limit is counted; the router reads the counts at most once a second, so one
                sent within that second of its last read may still run."""
                over = client.envelope("demo.llm", {"prompt": "one more"}, tenant="capped")
                client.publish(over)
                row = wait_for(lambda: ended(over.message_id), 60, "the request over the limit to end")
                return row if row["status"] == "FAILED" else None

            row = wait_for(one_more, 30, "FAILED BUDGET_EXCEEDED at the router", interval=0.2)
            assert row["last_error"]["code"] == "BUDGET_EXCEEDED" and row["last_error"]["kind"] == "BUDGET"
            assert "tenant capped: tokens limit 300/day reached" in row["last_error"]["message"]
            other = client.envelope("demo.llm", {"prompt": "another tenant"}, tenant="default")
            client.publish(other)
            assert wait_for(lambda: ended(other.message_id), 60, "another tenant's call")["status"] == "COMPLETED"

        gateway.start()
        refused = gateway.post("/v1/envelopes", {"capability": "demo.llm", "payload": {"prompt": "hi"}})
        assert refused.status_code == 429 and refused.json()["error"] == "budget_exceeded"
        assert refused.json()["message"].startswith("tenant capped: tokens limit 300/day reached")
    finally:
        gateway.stop()
        agent.terminate()
        agent.wait(60)
        app.stop()
