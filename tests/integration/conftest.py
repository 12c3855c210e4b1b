"""The real broker and Redis for integration tests, and a fresh namespace per test.

The broker comes from REACH_BOOTSTRAP, else the local broker of REACH_HOME (`reach local up`), else
testcontainers when a Docker engine answers. When none answers the test FAILS (never skips).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from reach.settings import KafkaSettings, ReachSettings
from reach.tooling.local.infra import KAFKA_VERSION, LocalInfra
from tests.integration.stream_app import StreamApp


@dataclass(frozen=True)
class Infra:
    bootstrap: str
    redis_url: str
    version: str


def _docker_running() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _find_infra() -> Infra | None:
    if os.environ.get("REACH_BOOTSTRAP") and os.environ.get("REACH_REDIS_URL"):
        return Infra(os.environ["REACH_BOOTSTRAP"], os.environ["REACH_REDIS_URL"], "external")
    status = LocalInfra(ReachSettings().home).status()
    if status.running and status.bootstrap and status.redis_url:
        return Infra(status.bootstrap, status.redis_url, f"Apache Kafka {KAFKA_VERSION} (local KRaft)")
    return None


_INFRA: Infra | None = None


RERUNS = 1
"""An integration test that fails runs once more (pytest-rerunfailures; the summary line counts every `rerun`,
and scripts/test.sh's `-raR` lists each by name under "rerun test summary info"). A test that fails twice fails
the run. Two failures this guarded against had real causes, since fixed: the health writer's replay skipped
receipts produced while it looked its start offsets up (test_health_writer), and test_router_crash checked ROUTED
receipts before the restarted router had routed its uncommitted records again. One remains unexplained:
test_router_routing's cost weight once waited 60 s for ROUTED on a topic created after the router started (the
local broker's server.log now records what the broker did)."""


HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in this directory is an integration test (marked here, whatever its module declares) and
    runs once more when it fails. The hook sees the whole session's items, so it filters by path."""
    for item in items:
        if not item.path.is_relative_to(HERE):
            continue
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=RERUNS, reruns_delay=2))


def pytest_report_header(config: pytest.Config) -> str:
    infra = _find_infra()
    if infra is None:
        return "broker: none found (integration tests will fail; run `make test`)"
    return f"broker: {infra.version} at {infra.bootstrap}; redis at {infra.redis_url}"


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    found = _find_infra()
    if found is None and _docker_running():
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer

        with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis:
            host, port = redis.get_container_host_ip(), redis.get_exposed_port(6379)
            yield Infra(kafka.get_bootstrap_server(), f"redis://{host}:{port}/0", "testcontainers")
        return
    if found is None:
        pytest.fail("No Kafka broker / Redis: run `make test` (it starts them), or `reach local up`, "
                    "or set REACH_BOOTSTRAP and REACH_REDIS_URL.", pytrace=False)
    AdminClient({"bootstrap.servers": found.bootstrap}).list_topics(timeout=10)
    yield found


@pytest.fixture
def namespace(infra: Infra, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A fresh REACH_NAMESPACE with topics.yaml applied: no two tests share topics, groups or state."""
    yield from fresh_namespace(infra, monkeypatch)


def fresh_namespace(infra: Infra, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The `namespace` fixture's body, for a module-scoped set-up (with a module-scoped MonkeyPatch)."""
    from reach.kafka import clients, topics
    from reach.names import Names

    ns = "t" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("REACH_NAMESPACE", ns)
    monkeypatch.setenv("REACH_BOOTSTRAP", infra.bootstrap)
    monkeypatch.setenv("REACH_REDIS_URL", infra.redis_url)
    monkeypatch.setenv("REACH_TOPICS_FILE", str(Path(__file__).resolve().parents[2] / "topics.yaml"))
    spec = topics.load(Path(os.environ["REACH_TOPICS_FILE"]))
    admin = clients.admin(KafkaSettings())
    topics.apply(admin, topics.plan(admin, spec.resolved(Names(ns))))
    yield ns
    # Each namespace holds ~60 partitions (3 open files each); a broker that kept them all would run out of
    # file handles long before a few hundred tests have run.
    mine = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{ns}.")]
    if mine:
        for future in admin.delete_topics(mine, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:  # noqa: BLE001 - a topic already gone is fine; cleanup never fails a test
                pass


@pytest.fixture
def stream_app(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StreamApp]:
    """A running `reach router` (faust worker: hot path, delay tiers, status table, timekeeper, web views)."""
    app = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(app.port))
    app.start()
    yield app
    app.stop()
