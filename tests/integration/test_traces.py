"""One trace holds a whole request, in a real OTLP receiver: a signed request through `reach gateway`, routed by
`reach router`, run by an agent whose handler asks a second agent for a child result, then called back through
`reach channels run --channel webhook`. Every process exports its own spans (OTLP/HTTP through
opentelemetry-sdk, configured only by the standard OTEL_* variables); the receiver holds them all under the
envelope's trace id, with the parent/child edges and the span links across the Kafka hops (decision 0066)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from reach.tooling.otlpsink import OtlpReceiver, ReceivedSpan
from reach.tracing import trace_int
from tests.integration.agent_support import spawn, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.stream_app import ROOT, StreamApp
from tests.integration.test_channels_closure import ready
from tests.integration.test_gateway_http import Gateway, create_app

pytestmark = pytest.mark.integration

SERVER, CONSUMER, PRODUCER, CLIENT = 2, 5, 4, 3  # opentelemetry-proto's Span.SpanKind values


@contextmanager
def process(*args: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m reach ARGS` with this test's environment, stopped (SIGTERM: its spans flushed) on exit."""
    proc = subprocess.Popen([sys.executable, "-m", "reach", *args], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


def one(spans: list[ReceivedSpan], name: str, **attributes: Any) -> ReceivedSpan:
    found = [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())]
    assert len(found) == 1, (name, attributes, sorted((s.service, s.name) for s in spans))
    return found[0]


def test_one_trace_holds_gateway_router_agent_child_and_callback(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    apps = {"shop": create_app("shop")}
    with OtlpReceiver() as otlp, listening(Receiver()) as hook:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint)  # nothing else: the standard variables
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
        router = StreamApp(tmp_path)
        monkeypatch.setenv("REACH_WEB_PORT", str(router.port))
        router.start()
        gateway = Gateway(tmp_path, apps)
        try:
            gateway.start()
            planner, lookup = (spawn(f"tests.integration.traced_agents:{name}") for name in ("planner", "lookup"))
            with process("channels", "run", "--channel", "webhook", REACH_CHANNEL_WEBHOOK_SECRET="wh",
                         REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE="true"):
                wait_for(lambda: ready(router, "agent://demo/trace-planner", "agent://demo/trace-lookup",
                                       "agent://channels/webhook"), 90, "three agents READY", interval=0.3)
                request = {"capability": "demo.plan", "version": "^1", "payload": {"city": "Bergen"},
                           "callback": f"{hook.url}/hook"}
                accepted = wait_for(lambda: (r := gateway.post("/v1/envelopes", request)).status_code == 202 and r,
                                    60, "the gateway to see the planner")
                sent = accepted.json()
                posted = wait_for(lambda: hook.posts()[:1], 90, "the callback at the webhook receiver")[0]
                assert json.loads(posted.body)["trace_id"] == sent["trace_id"]
                trace_id = f"{trace_int(sent['trace_id']):032x}"  # the W3C id of the envelope's trace

                def whole() -> list[ReceivedSpan] | None:
                    spans = otlp.trace(trace_id)
                    return spans if any(s.name == "send webhook" for s in spans) and len(
                        [s for s in spans if s.name.startswith("reach.route ")]) >= 3 else None

                spans = wait_for(whole, 60, "every process's spans at the receiver", interval=0.3)
            for proc in (planner, lookup):
                proc.terminate()
                proc.wait(30)
        finally:
            gateway.stop()
            router.stop()

    by_id = {s.span_id: s for s in spans}
    services = {s.service for s in spans}
    assert {"reach-gateway", "reach-router", "reach-agent", "reach-channel"} <= services, services
    # gateway -> router: the intake is the trace's root; its send is what the routing decision consumed
    intake = one(spans, "reach.intake demo.plan")
    assert intake.parent_span_id == "" and intake.kind == SERVER and intake.service == "reach-gateway"
    assert intake.attributes["a2a.task.id"] == sent["message_id"]
    gateway_send = by_id[next(s.span_id for s in spans if s.parent_span_id == intake.span_id)]
    assert gateway_send.kind == PRODUCER and gateway_send.attributes["messaging.system"] == "kafka"
    route = one(spans, "reach.route demo.plan")
    assert route.parent_span_id == gateway_send.span_id and route.service == "reach-router"
    assert route.attributes["reach.route.outcome"] == "Forward" and route.kind == CONSUMER
    assert route.attributes["messaging.destination.name"] == f"{namespace}.cap.demo.plan"
    # router -> agent: the delivery is a child of the routing decision and links to the span that created it
    handle = one(spans, "reach.handle demo.plan")
    assert handle.parent_span_id == route.span_id and handle.service == "reach-agent"
    assert (trace_id, gateway_send.span_id, {"reach.link": "created_by"}) in handle.links
    run = one(spans, "invoke_agent agent://demo/trace-planner")
    assert run.parent_span_id == handle.span_id and run.attributes["gen_ai.operation.name"] == "invoke_agent"
    # agent -> child request: the handler's send, routed, delivered and run in the other agent, same trace
    child_send = one(spans, f"send {namespace}.cap.demo.lookup")
    assert child_send.parent_span_id == run.span_id and child_send.kind == PRODUCER
    child_route = one(spans, "reach.route demo.lookup")
    assert child_route.parent_span_id == child_send.span_id
    child_handle = one(spans, "reach.handle demo.lookup")
    assert child_handle.parent_span_id == child_route.span_id
    assert (trace_id, child_send.span_id, {"reach.link": "created_by"}) in child_handle.links
    assert by_id[one(spans, "invoke_agent agent://demo/trace-lookup").parent_span_id] is child_handle
    # -> callback: the status fold's callback envelope, routed to the webhook channel and sent, in the same trace
    callback_route = one(spans, "reach.route channel.webhook")
    callback_run = one(spans, "invoke_agent agent://channels/webhook")
    webhook_send = one(spans, "send webhook")
    assert webhook_send.parent_span_id == callback_run.span_id and webhook_send.kind == CLIENT
    assert by_id[by_id[callback_run.parent_span_id].parent_span_id] is callback_route
    assert callback_route.attributes["gen_ai.conversation.id"] == sent["trace_id"]
