"""`reach local up --tls`: with the printed exports a request runs end to end over HTTPS (gateway), SASL_SSL with
SCRAM (every Kafka client: gateway, router, agent, CLI) and TLS Redis with an ACL user (gateway nonces and quotas,
the router's fence, the agent's leases); a client without the CA, or with a wrong password, is refused with exit 4
and a message naming TLS or the login, for Kafka and for Redis.

The broker and Redis are this module's own (a private REACH_HOME, free ports), stopped at teardown; the shared dev
broker is never touched. docs/decisions/0038-tls-and-auth-on-every-hop.md.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from cryptography.fernet import Fernet

from reach.tooling.bench import noop_agent
from reach.tooling.bench.gateway_stack import GatewayStack, envelope_body, post
from reach.tooling.local.certs import files_in
from reach.tooling.local.process import free_port
from tests.integration.local_support import (
    API_VERSIONS,
    ROOT,
    answer_to_plaintext,
    kafka_settings,
    local_up,
    reach,
    with_namespace,
)

_HANG_GUARD_S = 60  # a refused client must end well before this (the CLI's own broker timeout is 10 s)


@pytest.fixture(scope="module")
def tls_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment `eval $(reach local up --tls)` gives, for a broker and Redis of this module's own."""
    with local_up(tmp_path_factory.mktemp("tls-home"), "--tls") as (base, exports):
        assert exports["REACH_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert exports["REACH_REDIS_URL"].startswith("rediss://reach:")
        assert Path(exports["REACH_SSL_CA_FILE"]).is_file() and exports["REACH_REDIS_CA_FILE"]
        status = reach({**base, **exports}, "local", "status")
        assert status.returncode == 0 and status.stdout.splitlines() == [f"export {k}={v}" for k, v in exports.items()]
        yield {**base, **exports}


@pytest.mark.timeout(480)  # includes the module's `reach local up --tls` (~30 s idle, ~60 s at load average 9)
def test_a_request_runs_end_to_end_over_https_sasl_ssl_and_redis_tls(tls_env: dict[str, str],
                                                                      tmp_path: Path) -> None:
    env = with_namespace(tls_env)
    port = free_port()
    router_log = open(tmp_path / "router.log", "wb")
    # the router's faust worker (aiokafka) and its confluent hot path log in over SASL_SSL; its fence is on TLS Redis
    router = subprocess.Popen([sys.executable, "-m", "reach", "router", "--interval", "2"], cwd=ROOT,
                              env={**env, "REACH_WEB_PORT": str(port)}, stdout=router_log, stderr=subprocess.STDOUT)
    children = {k: v for k, v in env.items() if k.startswith("REACH_")}
    children["REACH_HOME"] = str(tmp_path / "gateway-home")  # the apps' at-rest key; the broker's state stays put
    try:
        tls = files_in(Path(tls_env["REACH_HOME"]) / "tls")
        with GatewayStack(env=children, kafka=kafka_settings(env), tls=tls) as gw:
            assert gw.url.startswith("https://")
            body = json.dumps({**json.loads(envelope_body()), "timeout_ms": 60_000}).encode()
            headers = gw.signed_app().headers(body, target="/v1/invoke")
            status, answer = post(gw.url + "/v1/invoke", body, headers, timeout=90, context=gw.context)
            assert status == 200, (answer, (tmp_path / "router.log").read_text(errors="replace")[-3000:])
            invoked = json.loads(answer)
            assert invoked["status"] == "COMPLETED" and invoked["agent_id"] == noop_agent.AGENT_ID, invoked
            # the CLI's producer and reply reader are SASL_SSL clients as well
            sent = reach(env, "send", noop_agent.CAPABILITY, "--payload", "{}", "--wait", "--json", "--timeout", "60")
            assert sent.returncode == 0, sent.stdout + sent.stderr
            assert json.loads(sent.stdout)["status"] == "COMPLETED"
    finally:
        router.terminate()
        try:
            router.wait(30)
        except subprocess.TimeoutExpired:
            router.kill()
        router_log.close()


def _refused(env: dict[str, str], *command: str) -> str:
    env = {**env, "REACH_NAMESPACE": "s" + uuid.uuid4().hex[:10], "REACH_WEB_PORT": str(free_port()),
           "REACH_GATEWAY_SECRETS_KEY": Fernet.generate_key().decode()}
    started = time.monotonic()
    out = reach(env, *command, timeout=_HANG_GUARD_S)
    assert out.returncode == 4, out.stdout + out.stderr
    print(f"{' '.join(command)}: exit 4 after {time.monotonic() - started:.1f}s")
    return " ".join(out.stderr.split())  # rich wraps long lines


def test_a_kafka_client_without_the_ca_is_refused_naming_tls(tls_env: dict[str, str]) -> None:
    env = {k: v for k, v in tls_env.items() if k != "REACH_SSL_CA_FILE"}  # the system trust store does not know it
    said = _refused(env, "topics", "plan")
    assert "TLS handshake failed" in said and "REACH_SSL_CA_FILE" in said, said


def test_a_kafka_client_with_a_wrong_password_is_refused(tls_env: dict[str, str]) -> None:
    said = _refused({**tls_env, "REACH_SASL_PASSWORD": "not-the-password"}, "topics", "plan")
    assert "authentication failed" in said.lower() and "REACH_SASL_PASSWORD" in said, said


def test_a_redis_client_without_the_ca_is_refused_naming_tls(tls_env: dict[str, str]) -> None:
    env = {k: v for k, v in tls_env.items() if k != "REACH_REDIS_CA_FILE"}
    said = _refused(env, "router")
    assert "Redis TLS handshake failed" in said and "REACH_REDIS_CA_FILE" in said, said


def test_a_redis_client_with_a_wrong_password_is_refused(tls_env: dict[str, str]) -> None:
    password = tls_env["REACH_REDIS_URL"].split(":", 2)[2].split("@", 1)[0]
    url = tls_env["REACH_REDIS_URL"].replace(f":{password}@", f":{quote('not-the-password')}@")
    said = _refused({**tls_env, "REACH_REDIS_URL": url}, "gateway", "--port", str(free_port()))
    assert "Redis authentication failed" in said and "REACH_REDIS_URL" in said, said
    assert password not in said and "not-the-password" not in said, "the message never shows a password"


def test_the_controller_listener_refuses_a_client_without_a_certificate(tls_env: dict[str, str]) -> None:
    """No hop is left open: the controller listener is TLS with client certificates required (mutual TLS)."""
    home = Path(tls_env["REACH_HOME"])
    port = int(json.loads((home / "local.json").read_text())["controller_port"])
    context = ssl.create_default_context(cafile=tls_env["REACH_SSL_CA_FILE"])  # trusts the broker, shows no cert
    with pytest.raises(ssl.SSLError, match="BAD_CERTIFICATE|CERTIFICATE_REQUIRED"):  # Java says bad_certificate
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\x00\x00\x00\x00")  # TLS 1.3 sends its "certificate required" alert after the handshake
                tls.recv(1)
    context.load_cert_chain(*(str(p) for p in (files_in(home / "tls").cert, files_in(home / "tls").key)))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:  # with the broker's certificate it answers
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(API_VERSIONS)
            assert tls.recv(8)[4:8] == b"\x00\x00\x00\x01", "the ApiVersions answer (correlation id 1)"
    for listener in (port, int(tls_env["REACH_BOOTSTRAP"].rsplit(":", 1)[1])):  # neither speaks plaintext Kafka
        assert answer_to_plaintext(listener) in (b"", b"\x15"), "closed, or a TLS alert record, never a Kafka answer"

