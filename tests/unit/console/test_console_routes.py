"""The console's routes over fakes: nothing without a token, viewers read, admins act, other origins are refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr

from reach import dlq
from reach.console.operators import OperatorTable, new_operator
from reach.console.wiring import Console
from reach.errors import InfraUnavailable
from reach.gateway.secrets import SecretBox
from reach.gateway.service import build_gateway
from reach.records import CanaryState, InstanceAction
from tests.unit.gateway.fakes import Fakes


class FakeBackend:
    """Records what the routes asked for; answers with fixed, recognisable data."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, InstanceAction, str]] = []
        self.redrives: list[tuple[dlq.Filters, bool, float | None]] = []
        self.weights_set: list[tuple[str, Mapping[str, float | None]]] = []

    def overview(self, since_ms: int, until_ms: int, bucket_ms: int) -> dict[str, Any]:
        return {"since_ms": since_ms, "until_ms": until_ms, "bucket_ms": bucket_ms, "receipts": 0,
                "capabilities": [], "series": {}, "backlog": []}

    def agents(self) -> list[dict[str, Any]]:
        return []

    def instance_action(self, instance_id: str, action: InstanceAction, by: str) -> None:
        self.actions.append((instance_id, action, by))

    def receipts_of(self, message_id: str, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
        return []

    def letters(self, filters: dlq.Filters, error_code: str | None) -> list[dict[str, Any]]:
        return [{"id": "0:1", "message_id": "m1", "error": {"code": "E1"}}] if error_code == "E1" else []

    def redrive(self, filters: dlq.Filters, *, dry_run: bool, rate: float | None) -> dict[str, Any]:
        self.redrives.append((filters, dry_run, rate))
        return {**dlq.Summary(replayed=sorted(filters.ids)).as_dict(), "dry_run": dry_run}

    def weights(self) -> dict[str, dict[str, Any]]:
        return {}

    def preview(self, scope: str, changes: Mapping[str, float | None]) -> dict[str, Any]:
        return {"scope": scope, "sampled": 0, "changed": 0, "moves": []}

    def set_weights(self, scope: str, changes: Mapping[str, float | None], by: str) -> dict[str, float]:
        self.weights_set.append((scope, changes))
        return {}

    def canaries(self) -> list[dict[str, Any]]:
        return []

    def finish_canary(self, agent_id: str, state: CanaryState, by: str) -> None:
        raise AssertionError("not called in these tests")


@pytest.fixture
def setup() -> tuple[TestClient, FakeBackend, dict[str, str]]:
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    table = OperatorTable(box)
    tokens = {}
    for role in ("viewer", "admin"):
        record, made = new_operator(box, name=role, role=role, redrive_rate=5, now_ms=1, by="t")
        table.apply(record.app_id, record)
        tokens[role] = made.token
    backend = FakeBackend()
    deps = Fakes().deps()
    app = build_gateway(type(deps)(**{**deps.__dict__, "console": Console(operators=table, backend=backend)}))
    return TestClient(app, follow_redirects=False), backend, tokens


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


PAGES = ["/console", "/console/agents", "/console/messages", "/console/dead-letters", "/console/routing"]
APIS = ["/console/api/whoami", "/console/api/overview", "/console/api/agents", "/console/api/dead-letters",
        "/console/api/weights", "/console/api/canaries"]


def test_nothing_is_reachable_without_a_live_token(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, _ = setup
    for path in PAGES:
        resp = client.get(path)
        assert resp.status_code == 303 and resp.headers["location"] == "/console/login", path
    for path in APIS:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers=_bearer("opk_nope.nope")).status_code == 401, path
    assert client.post("/console/api/agents/action", json={"instance_id": "i", "action": "drain"}).status_code == 401
    assert client.post("/console/agents/action", data={"instance_id": "i", "action": "drain"}).status_code == 303
    assert backend.actions == []


def test_a_viewer_reads_every_page_and_gets_403_on_every_mutation(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer = _bearer(tokens["viewer"])
    for path in PAGES + APIS:
        assert client.get(path, headers=viewer).status_code == 200, path
    mutations = [("/console/api/agents/action", {"instance_id": "i", "action": "drain"}),
                 ("/console/api/dead-letters/redrive", {"ids": ["0:1"]}),
                 ("/console/api/weights", {"scope": "*", "load": 1}),
                 ("/console/api/canaries", {"agent_id": "agent://a", "action": "promote"})]
    for path, body in mutations:
        assert client.post(path, json=body, headers=viewer).status_code == 403, path
    for path in ("/console/agents/action", "/console/dead-letters/redrive", "/console/routing/apply",
                 "/console/routing/canary"):
        assert client.post(path, data={"instance_id": "i", "action": "drain"}, headers=viewer).status_code == 403
    assert client.post("/console/api/dead-letters/dry-run", json={"capability": "x"}, headers=viewer).status_code == 200
    assert backend.actions == [] and backend.weights_set == [] and [r[1] for r in backend.redrives] == [True]


def test_an_admin_acts_and_a_redrive_is_capped_at_the_operators_rate(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    admin = _bearer(tokens["admin"])
    assert client.post("/console/api/agents/action", json={"instance_id": "i-1", "action": "drain"},
                       headers=admin).json() == {"instance_id": "i-1", "action": "DRAIN"}
    assert backend.actions == [("i-1", InstanceAction.DRAIN, "console:admin")]
    resp = client.post("/console/api/dead-letters/redrive", json={"rate": 50}, headers=admin)
    assert resp.status_code == 400 and "dry run" in resp.json()["message"]  # a redrive names what its dry run listed
    done = client.post("/console/api/dead-letters/redrive", json={"ids": ["0:1", "0:2"], "rate": 50}, headers=admin)
    assert done.status_code == 200 and done.json()["rate"] == 5 and done.json()["replayed_ids"] == ["0:1", "0:2"]
    narrowed = client.post("/console/api/dead-letters/dry-run", json={"error_code": "E1"}, headers=admin).json()
    assert narrowed["replayed_ids"] == ["0:1"]
    bad = client.post("/console/api/weights", json={"scope": "*", "load": "heavy"}, headers=admin)
    assert bad.status_code == 400 and "load" in bad.json()["message"]


def test_login_sets_a_strict_http_only_cookie_and_other_origins_cannot_act(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    assert client.post("/console/login", data={"token": "opk_x.y"}).status_code == 401
    resp = client.post("/console/login", data={"token": tokens["admin"]})
    assert resp.status_code == 303 and resp.headers["location"] == "/console"
    cookie = resp.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    assert client.get("/console/agents").status_code == 200  # the cookie is sent back
    evil = client.post("/console/agents/action", data={"instance_id": "i", "action": "drain"},
                       headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403 and backend.actions == []
    same = client.post("/console/agents/action", data={"instance_id": "i", "action": "drain"},
                       headers={"Origin": "http://testserver"})
    assert same.status_code == 303 and backend.actions == [("i", InstanceAction.DRAIN, "console:admin")]
    assert client.post("/console/logout").status_code == 303


def test_a_broker_that_does_not_answer_is_a_503_and_a_page_says_so(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, tokens = setup

    def down() -> list[dict[str, Any]]:
        raise InfraUnavailable("The Kafka broker did not answer")

    monkeypatch.setattr(backend, "agents", down)
    api = client.get("/console/api/agents", headers=_bearer(tokens["viewer"]))
    assert api.status_code == 503 and api.json()["error"] == "unavailable" and "retry" in api.json()["hint"]
    page = client.get("/console/agents", headers=_bearer(tokens["viewer"]))
    assert page.status_code == 503 and "did not answer" in page.text
    unknown = client.get("/console/api/messages?q=nope", headers=_bearer(tokens["viewer"]))
    assert unknown.status_code == 200 and unknown.json()["messages"] == []


def test_an_instance_id_cannot_break_out_of_the_confirmation_script(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, tokens = setup
    hostile = "x');alert(1);('\"><script>alert(2)</script>"
    monkeypatch.setattr(backend, "agents", lambda: [{
        "agent_id": "agent://a", "instance_id": hostile, "state": "READY", "region": None, "build_version": "1",
        "inflight": 0, "max_concurrency": 1, "queued": None, "max_queue": 0, "success_1m": None, "p95_ms": None,
        "breaker": "CLOSED", "arm": None, "heartbeat_age_ms": 10}])
    page = client.get("/console/agents", headers=_bearer(tokens["viewer"])).text
    assert "<script>" not in page and "');alert(1)" not in page
    assert "\\u0027);alert(1);(\\u0027" in page  # inside the confirm() string, as JSON escapes


def test_bodies_and_windows_are_bounded_before_anything_is_read_into_memory(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, _, tokens = setup
    huge = client.post("/console/login", content=b"token=" + b"x" * (300 * 1024),
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert huge.status_code == 413  # unauthenticated: refused before the body is held
    viewer = _bearer(tokens["viewer"])
    far = client.get("/console/api/overview?since=1&until=172800001", headers=viewer)
    assert far.status_code == 400 and "at most 24 h" in far.json()["message"]
    day = client.get("/console/api/overview?since=1&until=86400001&bucket_ms=1000", headers=viewer).json()
    assert day["bucket_ms"] >= 86_400_000 // 500  # no more than 500 points, whatever bucket_ms asks
