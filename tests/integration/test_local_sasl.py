"""`reach local up --sasl`: with the printed SCRAM credentials the router and an agent route a message; with a
wrong password the CLI says "authentication failed" and exits 4 instead of waiting out its timeout.

The broker is this module's own (a private REACH_HOME, free ports), stopped at teardown; the shared dev
broker is never touched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from reach.tooling.bench.gateway_stack import ENVELOPES, GatewayStack, envelope_body, post
from reach.tooling.local.process import free_port
from tests.integration.agent_support import wait_for
from tests.integration.local_support import ROOT, kafka_settings, local_up, reach, with_namespace

# bounds for "does not hang": the CLI's own broker timeout is 10 s; a refused login must end well before it
_HANG_GUARD_S = 60


@pytest.fixture(scope="module")
def sasl_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment `eval $(reach local up --sasl)` gives, for a broker of this module's own."""
    with local_up(tmp_path_factory.mktemp("sasl-home"), "--sasl") as (base, exports):
        assert exports["REACH_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
        assert exports["REACH_SASL_MECHANISM"] in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        assert exports["REACH_SASL_USERNAME"] and exports["REACH_SASL_PASSWORD"]
        yield {**base, **exports}


def _healthy(port: int, proc: subprocess.Popen[bytes], log: Path) -> bool:
    assert proc.poll() is None, f"the router exited: {log.read_text(errors='replace')[-3000:]}"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return bool(json.loads(resp.read()).get("ok"))
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _echo_ready(env: dict[str, str]) -> bool:
    out = reach(env, "agents", "--json")
    return out.returncode == 0 and any(r["agent_id"] == "agent://demo/echo" and r["state"] == "READY"
                                       for r in json.loads(out.stdout or "[]"))


def test_router_and_agent_route_with_the_scram_credentials(sasl_env: dict[str, str], tmp_path: Path) -> None:
    env = with_namespace(sasl_env)
    port = free_port()
    router_log, agent_log = open(tmp_path / "router.log", "wb"), open(tmp_path / "agent.log", "wb")
    # the faust worker (aiokafka) and the confluent hot path both log in over SASL/SCRAM
    router = subprocess.Popen([sys.executable, "-m", "reach", "router", "--interval", "2"], cwd=ROOT,
                              env={**env, "REACH_WEB_PORT": str(port)}, stdout=router_log, stderr=subprocess.STDOUT)
    agent = subprocess.Popen([sys.executable, "-m", "reach", "agent", "run", "examples.echo_agent:agent"], cwd=ROOT,
                             env=env, stdout=agent_log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _healthy(port, router, tmp_path / "router.log"), 120, "the router's /healthz", interval=0.5)
        wait_for(lambda: _echo_ready(env), 60, "the echo agent READY in the registry", interval=0.5)
        sent = reach(env, "send", "demo.echo", "--payload", '{"text": "over scram"}', "--wait", "--json",
                      "--timeout", "60")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        receipt = json.loads(sent.stdout)
        assert receipt["status"] == "COMPLETED" and receipt["agent_id"] == "agent://demo/echo"
        assert receipt["result"] == {"text": "over scram"}
    finally:
        for proc in (agent, router):
            proc.terminate()
        for proc in (agent, router):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        router_log.close()
        agent_log.close()


def test_the_gateway_accepts_signed_requests_over_scram(sasl_env: dict[str, str], tmp_path: Path) -> None:
    env = with_namespace(sasl_env)
    env["REACH_HOME"] = str(tmp_path / "gateway-home")  # its app secrets' at-rest key; the broker's state stays put
    # the gateway's Kafka clients (apps directory, registry, publisher, replies) all log in over SASL/SCRAM
    children = {k: v for k, v in env.items() if k.startswith("REACH_")}
    with GatewayStack(env=children, kafka=kafka_settings(env)) as gateway:
        body = envelope_body(payload={"text": "over scram"})
        status, answer = post(gateway.url + ENVELOPES, body, gateway.signed_app().headers(body))
        assert status == 202, answer
        assert json.loads(answer)["message_id"]


@pytest.mark.parametrize("command", [("topics", "plan"), ("send", "demo.echo", "--payload", "{}"), ("router",),
                                     ("gateway", "--port", "{port}")])
def test_a_wrong_password_fails_fast_with_exit_4(sasl_env: dict[str, str], command: tuple[str, ...]) -> None:
    env = {**sasl_env, "REACH_NAMESPACE": "s" + uuid.uuid4().hex[:10], "REACH_SASL_PASSWORD": "not-the-password",
           "REACH_WEB_PORT": str(free_port()), "REACH_GATEWAY_SECRETS_KEY": Fernet.generate_key().decode()}
    command = tuple(str(free_port()) if part == "{port}" else part for part in command)
    started = time.monotonic()
    out = reach(env, *command, timeout=_HANG_GUARD_S)
    took = time.monotonic() - started
    assert out.returncode == 4, out.stdout + out.stderr
    assert "authentication failed" in out.stderr.lower(), out.stderr
    assert "REACH_SASL_PASSWORD" in out.stderr.replace("\n", ""), "the error names what to check"
    print(f"{' '.join(command)}: exit 4 after {took:.1f}s")


def test_a_client_without_credentials_is_refused_by_the_sasl_listener(sasl_env: dict[str, str]) -> None:
    env = {k: v for k, v in sasl_env.items() if not k.startswith(("REACH_SASL_", "REACH_SECURITY_"))}
    out = reach(env, "topics", "plan", timeout=_HANG_GUARD_S)
    assert out.returncode == 4, out.stdout + out.stderr
