"""Every query of docker/grafana/agentreach-dashboard.json reads series that running processes expose: `reach
router`, `reach gateway` and an agent (`reach agent run`, REACH_AGENT_METRICS_PORT), with the webhook channel
agent, started against the real broker and Redis and given traffic that passes through every panel (a request
retried once, completed and called back; one that fails every attempt). A real Prometheus (Debian's package, as
for the alert rules' tests) scrapes their /metrics; each query must parse in it, and each metric name it reads
must be a series it holds, with every label the query selects on or groups by."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from reach.client import Client
from reach.tooling.local.process import free_port
from tests.dashboard_queries import dashboard_queries, series
from tests.integration.agent_support import spawn, wait_for
from tests.integration.channel_servers import Receiver, listening
from tests.integration.stream_app import StreamApp
from tests.integration.test_channels_closure import ready
from tests.integration.test_gateway_http import Gateway, create_app
from tests.integration.test_traces import process

pytestmark = pytest.mark.integration


def get(url: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=10) as resp:  # noqa: S310
        return json.loads(resp.read())


@contextmanager
def prometheus(tmp_path: Path, targets: dict[str, str]) -> Iterator[str]:
    """Debian's `prometheus` on a free loopback port, scraping each job's host:port every second."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus: apt-get install -y --no-install-recommends prometheus (.ci/run does)"
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()]}))
    port = free_port()
    with open(tmp_path / "prometheus.log", "wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url, len(targets)), 60, "prometheus scraping every target", interval=0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _up(url: str, count: int) -> bool:
    try:
        found = get(url + "/api/v1/query", query="up == 1")["data"]["result"]
    except OSError:
        return False
    return len(found) == count


def disagreements(url: str) -> list[str]:
    """What the dashboard reads that Prometheus does not hold: `panel: error`, `panel: metric` or
    `panel: metric{label}`."""
    missing = []
    for title, expr in dashboard_queries():
        try:
            get(url + "/api/v1/query", query=expr)  # Prometheus's own parser and evaluator: 400 when it fails
        except urllib.error.HTTPError as exc:
            missing.append(f"{title}: {exc.read().decode()}")
            continue
        for one in series(expr).values():
            held = get(url + "/api/v1/series", **{"match[]": one.name})["data"]
            labels = set().union(*(set(s) for s in held)) if held else set()
            if not held:
                missing.append(f"{title}: {one.name}")
            elif one.labels - labels:
                missing.append(f"{title}: {one.name}{{{','.join(sorted(one.labels - labels))}}}")
    return missing


def test_every_dashboard_query_names_a_series_the_processes_expose(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_GATEWAY_SECRETS_KEY", Fernet.generate_key().decode())
    apps = {"shop": create_app("shop")}
    router = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(router.port))
    router.start()
    gateway = Gateway(tmp_path, apps)
    agent_port = free_port()
    agent = spawn("examples.flaky_agent:agent", REACH_AGENT_METRICS_PORT=str(agent_port))
    try:
        gateway.start()
        with listening(Receiver()) as hook, process("channels", "run", "--channel", "webhook",
                                                    REACH_CHANNEL_WEBHOOK_SECRET="wh",
                                                    REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE="true"):
            wait_for(lambda: ready(router, "agent://demo/flaky", "agent://channels/webhook"), 90,
                     "the flaky and the webhook agents READY", interval=0.3)
            request = {"capability": "demo.flaky", "version": "^1", "payload": {"fail_times": 1},
                       "callback": f"{hook.url}/hook"}
            wait_for(lambda: gateway.post("/v1/envelopes", request).status_code == 202, 60,
                     "the gateway to accept a request for the flaky agent")
            with Client() as client:
                client.send("demo.flaky", {"fail_times": 99}, max_attempts=2)  # retries run out: a dead letter
            wait_for(lambda: hook.posts()[:1], 90, "the callback at the webhook receiver")
            jobs = {"router": f"127.0.0.1:{router.port}", "gateway": f"127.0.0.1:{gateway.port}",
                    "agent": f"127.0.0.1:{agent_port}"}
            with prometheus(tmp_path, jobs) as url:
                deadline = time.monotonic() + 60
                missing = disagreements(url)
                while missing and time.monotonic() < deadline:  # the fold and the gauges update on their own ticks
                    time.sleep(1)
                    missing = disagreements(url)
                assert missing == []
    finally:
        agent.terminate()
        agent.wait(30)
        gateway.stop()
        router.stop()
