"""An agent exposes its own Prometheus metrics on an opt-in port."""

from __future__ import annotations

import urllib.request

from reach.client import Client
from reach.envelopes import now_ms
from reach.names import Names
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.local.process import free_port
from tests.integration.agent_support import spawn, wait_for


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def test_agent_metrics_endpoint_counts_outcomes(namespace: str) -> None:
    port = free_port()
    proc = spawn("examples.echo_agent:agent", REACH_AGENT_METRICS_PORT=str(port))
    try:
        names = Names(namespace)
        wait_for(lambda: read_registry(KafkaSettings(), names).live(now_ms()), 60, "echo READY")
        with Client() as client:
            for n in range(3):
                client.publish(client.envelope("demo.echo", {"n": n}), topic=names.inbox("agent://demo/echo"))
        line = 'agentreach_agent_messages_total{agent_id="agent://demo/echo",capability="demo.echo",outcome="complete"}'
        text = wait_for(lambda: (lambda t: t if f"{line} 3.0" in t else None)(scrape(port)), 30, "3 completions")
        assert "agentreach_agent_handler_seconds_bucket" in text
    finally:
        proc.terminate()
        proc.wait(60)
