"""A running `reach gateway` for the bench and the gateway's integration tests: a READY agent serving the
capability, one signed app made by `reach apps create`, and the gateway process answering that app's 202s."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from reach import signing
from reach.envelopes import now_ms
from reach.names import Names
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.bench import noop_agent
from reach.tooling.bench.subprocesses import Child
from reach.tooling.local.certs import TlsFiles
from reach.tooling.local.process import free_port

ENVELOPES = "/v1/envelopes"
PAYLOAD = {"text": "x" * 200}  # the bench's small request (docs/performance.md)


@dataclass(frozen=True)
class SignedApp:
    """A calling app's key id and secret, as `reach apps create --json` prints them once."""

    app_id: str
    key_id: str
    secret: str

    def headers(self, body: bytes, *, method: str = "POST", target: str = ENVELOPES, now: int | None = None,
                nonce: str | None = None) -> dict[str, str]:
        """Reach-Key and a v2 Reach-Signature over this method, target (path?query) and exactly these body bytes,
        made now with a fresh nonce."""
        t = int(time.time()) if now is None else now
        header = signing.sign_request(self.secret.encode(), method=method, target=target, body=body, t=t,
                                      nonce=nonce or uuid.uuid4().hex)
        return {"Reach-Key": self.key_id, "Reach-Signature": header, "Content-Type": "application/json"}


def envelope_body(capability: str = noop_agent.CAPABILITY, payload: object = None, version: str = "*") -> bytes:
    """A POST /v1/envelopes body (issue 13: capability, version range, JSON payload)."""
    body = {"capability": capability, "version": version, "payload": PAYLOAD if payload is None else payload}
    return json.dumps(body, separators=(",", ":")).encode()


def post(url: str, body: bytes, headers: dict[str, str], timeout: float = 10.0,
         context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """One blocking POST (`context`: how an https:// URL is verified); the status and body whatever the status."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


class GatewayStack:
    """The agent, the app and one gateway process in the namespace of `env` (REACH_* of the children).

    `env` must carry an absolute REACH_HOME: the children run in directories of their own, and the app CLI and
    the gateway share the at-rest key of the app secrets kept there. With `tls` (the files of `reach local up
    --tls`) the gateway serves HTTPS with its certificate and `context` trusts its CA."""

    def __init__(self, *, env: dict[str, str], kafka: KafkaSettings | None = None,
                 gateway_args: tuple[str, ...] = (), tls: TlsFiles | None = None) -> None:
        self.env = env
        self.kafka = kafka or KafkaSettings()
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.context = None if tls is None else ssl.create_default_context(cafile=str(tls.ca))
        https = () if tls is None else ("--tls-cert", str(tls.cert), "--tls-key", str(tls.key))
        self.gateway_args = (*gateway_args, *https)
        self.agent: Child | None = None
        self.gateway: Child | None = None
        self.app: SignedApp | None = None

    def __enter__(self) -> GatewayStack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 120.0) -> None:
        names = Names(self.env["REACH_NAMESPACE"])
        self.agent = Child("gateway-agent", ["reach", "agent", "run", f"{noop_agent.__name__}:agent",
                                             "--log-level", "WARNING"], self.env)
        self.agent.wait_until(lambda: any(r.agent_id == noop_agent.AGENT_ID for r in
                                          read_registry(self.kafka, names, timeout=5).live(now_ms())),
                              timeout, f"{noop_agent.AGENT_ID} READY in the registry")
        self.app = self._create_app()
        self.gateway = Child("gateway", ["reach", "gateway", "--host", "127.0.0.1", "--port", str(self.port),
                                         *self.gateway_args], self.env)
        self.gateway.wait_until(self._accepts, timeout, "a 202 for a signed request")

    def _create_app(self) -> SignedApp:
        done = subprocess.run([sys.executable, "-m", "reach", "apps", "create", "bench", "--rate", "1000000",
                               "--burst", "1000000", "--json"], env={**os.environ, **self.env}, capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"`reach apps create` failed ({done.returncode}): {done.stderr[-2000:]}")
        made = json.loads(done.stdout)
        return SignedApp(app_id=made["app_id"], key_id=made["key_id"], secret=made["secret"])

    def _accepts(self) -> bool:
        """Healthy, and the app is known (the gateway reads apps from <ns>.apps, a moment after create)."""
        assert self.app is not None
        body = envelope_body()
        status, _ = post(self.url + ENVELOPES, body, self.app.headers(body), timeout=5, context=self.context)
        return status == 202

    def signed_app(self) -> SignedApp:
        assert self.app is not None, "start() first"
        return self.app

    def stop(self) -> None:
        for child in (self.gateway, self.agent):
            if child is not None:
                child.stop()

    def tail(self) -> str:
        return self.gateway.tail(60) if self.gateway is not None else ""


def child_env(namespace: str, kafka: KafkaSettings, *, home: Path, redis_url: str, topics_file: Path) -> dict[str, str]:
    """The REACH_* a stack's children need (absolute paths: they run in directories of their own)."""
    return {"REACH_NAMESPACE": namespace, "REACH_BOOTSTRAP": kafka.servers(), "REACH_REDIS_URL": redis_url,
            "REACH_HOME": str(home.resolve()), "REACH_TOPICS_FILE": str(topics_file.resolve())}
