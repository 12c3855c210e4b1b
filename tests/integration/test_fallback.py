"""Fallback on the real broker and Redis (issue 25 item 3): `demo.flaky` with `--fallback demo.echo` and a payload
that always fails ends DEAD_LETTERED after its retries and is COMPLETED by the fallback, one trace, the caller's
webhook hearing once of the final outcome; an UNROUTABLE request goes to the fallback from the router; a fallback
that loops or names an unknown capability is refused with exit 2 and the workers keep serving."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.cli import app as reach_app
from reach.client import Client
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import reach_cli, running, spawn, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.router_helpers import ensure
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.integration


def cli(*args: str) -> Any:
    """`reach ARGS` in this process, as JSON (exit 0 expected)."""
    result = CliRunner().invoke(reach_app, list(args))
    assert result.exit_code == 0, f"{result.output} {result.exception!r}"
    return json.loads(result.stdout)


def said(done: subprocess.CompletedProcess[str]) -> str:
    """What a command printed, its line wrapping undone."""
    return " ".join((done.stdout + done.stderr).split())


def row(app: StreamApp, message_id: str) -> dict[str, Any] | None:
    found = app.get(f"/messages/{message_id}")
    return None if "_status" in found else found


def served(app: StreamApp, message_id: str) -> dict[str, Any] | None:
    """The row once its fallback's child has ended (the view joins the child's status)."""
    found = row(app, message_id)
    fallback = (found or {}).get("fallback") or {}
    return found if fallback.get("status") in ("COMPLETED", "FAILED", "DEAD_LETTERED", "REJECTED") else None


def ready(app: StreamApp, *agent_ids: str) -> bool:
    return set(agent_ids) <= {a["agent_id"] for a in app.get("/agents") if a["state"] == "READY"}  # type: ignore[union-attr]


def test_a_request_that_always_fails_is_completed_by_its_fallback_and_calls_back_once(
        namespace: str, stream_app: StreamApp) -> None:
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    flaky, echo = spawn("examples.flaky_agent:agent"), spawn("examples.echo_agent:agent")
    try:
        with listening(Receiver()) as receiver, running(webhook), Client() as client:
            wait_for(lambda: ready(stream_app, "agent://demo/flaky", "agent://demo/echo", "agent://channels/webhook"),
                     90, "flaky, echo and webhook READY", interval=0.3)
            # bad input first: a loop and an unknown capability are refused with exit 2, nothing is published
            cli("policy", "set", "--capability", "demo.flaky", "--fallback", "demo.echo", "--max-attempts", "2",
                "--backoff-base", "100ms", "--json")
            looped = reach_cli("policy", "set", "--capability", "demo.echo", "--fallback", "demo.flaky")
            assert looped.returncode == 2 and "the fallbacks loop: demo.echo -> demo.flaky -> demo.echo" in said(
                looped), looped
            unknown = reach_cli("policy", "set", "--capability", "demo.flaky", "--fallback", "demo.nowhere")
            assert unknown.returncode == 2 and "is not a capability any agent registers" in said(unknown), unknown
            shown = cli("policy", "show", "--capability", "demo.echo", "--json")
            assert shown[0]["fields"]["fallback"]["value"] is None, "the refused loop published nothing"

            mid = client.send("demo.flaky", {"fail_times": 99}, callback=f"webhook:{receiver.url}/hook")
            parent = wait_for(lambda: served(stream_app, mid), 90, "the fallback's child ended", interval=0.3)
            child_id = f"{mid}-fb0"
            assert parent["status"] == "DEAD_LETTERED" and parent["fallback"] == {
                "capability": "demo.echo", "message_id": child_id, "note": None, "status": "COMPLETED"}
            child = row(stream_app, child_id)
            assert child is not None and child["capability"] == "demo.echo" and child["trace_id"] == parent["trace_id"]
            assert json.loads(child["result"]) == {"fail_times": 99}, "the same payload"

            hit = wait_for(lambda: receiver.posts()[:1], 60, "the callback at the receiver")[0]
            body = json.loads(hit.body)
            assert (body["message_id"], body["status"], body["trace_id"]) == (child_id, "COMPLETED",
                                                                               parent["trace_id"])
            # the parent sent none of its own: its callback went with the child (no `<mid>-cb0` message exists)
            assert parent["callback_sent"] and row(stream_app, f"{mid}-cb0") is None
            assert len(receiver.posts()) == 1

            status = CliRunner().invoke(reach_app, ["status", mid])
            assert status.exit_code == 0, status.output  # served: the chain COMPLETED
            assert f"fallback: demo.echo {child_id} COMPLETED" in status.output
            trace = cli("trace", parent["trace_id"], "--json")
            assert {r["message_id"] for r in trace["messages"]} == {mid, child_id, f"{child_id}-cb0"}
            assert next(r for r in trace["messages"] if r["message_id"] == mid)["fallback"]["status"] == "COMPLETED"
            assert httpx.get(stream_app.url + "/healthz", timeout=5).json()["ok"], "no worker stopped"
    finally:
        for proc in (flaky, echo):
            proc.terminate()
            proc.wait(60)


def test_an_unroutable_request_goes_to_the_fallback_from_the_router(namespace: str, stream_app: StreamApp) -> None:
    ensure(Names(namespace), Names(namespace).capability("demo.nobody"))  # a capability with a topic, no agent
    echo = spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: ready(stream_app, "agent://demo/echo"), 90, "echo READY", interval=0.3)
        cli("policy", "set", "--capability", "demo.nobody", "--fallback", "demo.echo", "--json")
        with Client() as client:
            mid = client.send("demo.nobody", {"order": 7})
        parent = wait_for(lambda: served(stream_app, mid), 90, "the fallback's child ended", interval=0.3)
        assert parent["status"] == "UNROUTABLE"
        assert parent["fallback"] == {"capability": "demo.echo", "message_id": f"{mid}-fb0", "note": None,
                                      "status": "COMPLETED"}
        child = row(stream_app, f"{mid}-fb0")
        assert child is not None and json.loads(child["result"]) == {"order": 7}
        assert {r["message_id"] for r in cli("trace", parent["trace_id"], "--json")["messages"]} == {
            mid, f"{mid}-fb0"}
    finally:
        echo.terminate()
        echo.wait(60)


def test_send_wait_prints_the_fallbacks_result_and_exits_0(namespace: str, stream_app: StreamApp) -> None:
    """A waiting caller follows the chain (issue 40 item 3): `reach send --wait` to a capability nobody serves, whose
    POLICY fallback is demo.echo, prints the echo's result and exits 0, saying the request itself ended UNROUTABLE;
    the request's own row keeps its first ending."""
    ensure(Names(namespace), Names(namespace).capability("demo.nobody"))
    echo = spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: ready(stream_app, "agent://demo/echo"), 90, "echo READY", interval=0.3)
        cli("policy", "set", "--capability", "demo.nobody", "--fallback", "demo.echo", "--json")
        done = reach_cli("send", "demo.nobody", "--payload", '{"order": 8}', "--wait", "--timeout", "40", "--json")
        assert done.returncode == 0, said(done)
        shown = json.loads(done.stdout)
        mid = shown["first"]["message_id"]
        assert (shown["status"], shown["result"], shown["message_id"]) == ("COMPLETED", {"order": 8}, f"{mid}-fb0")
        assert shown["first"] == {"message_id": mid, "capability": "demo.nobody", "status": "UNROUTABLE"}
        assert row(stream_app, mid)["status"] == "UNROUTABLE", "the row's first ending stands"  # type: ignore[index]

        human = reach_cli("send", "demo.nobody", "--payload", '{"order": 9}', "--wait", "--timeout", "40")
        assert human.returncode == 0 and "UNROUTABLE (demo.nobody); served by its fallback demo.echo" in said(human)
        assert '"order": 9' in said(human) and "COMPLETED" in said(human)
    finally:
        echo.terminate()
        echo.wait(60)


def test_the_gateways_invoke_answers_the_chains_outcome(namespace: str, stream_app: StreamApp,
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """`POST /v1/invoke` over HTTP to a real gateway (broker, Redis, `reach router`, the flaky and echo agents): a
    request to demo.flaky that always fails, whose POLICY fallback is demo.echo, answers 200 with the echo's result
    under the request's own message_id, `chain` saying the request ended DEAD_LETTERED and its child `<id>-fb0`
    COMPLETED; the row keeps its first ending."""
    from cryptography.fernet import Fernet

    from tests.integration.test_gateway_http import Gateway, create_app

    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    flaky, echo = spawn("examples.flaky_agent:agent"), spawn("examples.echo_agent:agent")
    gateway = Gateway(tmp_path, {"shop": create_app("shop")})
    try:
        gateway.start()
        wait_for(lambda: ready(stream_app, "agent://demo/flaky", "agent://demo/echo"), 90, "flaky and echo READY",
                 interval=0.3)
        cli("policy", "set", "--capability", "demo.flaky", "--fallback", "demo.echo", "--max-attempts", "2",
            "--backoff-base", "100ms", "--json")
        answer = gateway.post("/v1/invoke", {"capability": "demo.flaky", "payload": {"fail_times": 99},
                                             "timeout_ms": 60_000})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        mid = body["message_id"]
        assert (body["status"], body["result"], body.get("error")) == ("COMPLETED", {"fail_times": 99}, None)
        assert body["chain"] == [{"message_id": mid, "capability": "demo.flaky", "status": "DEAD_LETTERED"},
                                 {"message_id": f"{mid}-fb0", "capability": "demo.echo", "status": "COMPLETED"}]
        assert row(stream_app, mid)["status"] == "DEAD_LETTERED", "the row's first ending stands"  # type: ignore[index]
    finally:
        gateway.stop()
        for agent in (flaky, echo):
            agent.terminate()
            agent.wait(60)
