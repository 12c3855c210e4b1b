"""The console's routes over fakes: nothing without a token, viewers read, admins act, other origins are refused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr

from reach import dlq
from reach.apps import AppError
from reach.channels.settings import ClosureSettings
from reach.console.backend import Backend, ConsoleBackend
from reach.console.operators import OperatorTable
from reach.console.wiring import Console
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.intent import stats as intent_stats
from reach.intent.handoff import Handoff, HandoffCandidate
from reach.names import Names
from reach.ops import audit as ops_audit
from reach.ops.handoff import summary
from reach.ops.operators import new_operator
from reach.records import (
    AgentRegistration,
    AgentState,
    CanaryState,
    Capability,
    InstanceAction,
    IntentResolution,
    Receipt,
    Status,
)
from reach.secretbox import SecretBox
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.unit.gateway.fakes import Fakes


class FakeBackend:
    """Records what the routes asked for; answers with fixed, recognisable data."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, InstanceAction, str]] = []
        self.redrives: list[tuple[dlq.Filters, bool, float | None]] = []
        self.weights_set: list[tuple[str, Mapping[str, float | None]]] = []
        self.intents_since: list[int | None] = []
        self.handoffs: list[tuple[str, str, str | None, str | None]] = []
        self.audits: list[dict[str, Any]] = []
        self.policy_sets: list[tuple[str, Mapping[str, Any], str]] = []
        self.canary_starts: list[dict[str, Any]] = []
        self.quotas: list[tuple[str, float | None, int | None, str]] = []
        self.operator_changes: list[tuple[str, str, str]] = []

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

    def redrive(self, filters: dlq.Filters, *, dry_run: bool, rate: float | None, by: str) -> dict[str, Any]:
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

    def intents(self, since_ms: int | None) -> dict[str, Any]:
        self.intents_since.append(since_ms)
        return {"map": MAP, "stats": intent_stats.fold(STAGE_RECEIPTS).as_dict(), "handoffs": [summary(HANDOFF)]}

    def handoff(self, message_id: str, *, by: str, answer: str | None = None,
                capability: str | None = None) -> dict[str, Any]:
        self.handoffs.append((message_id, by, answer, capability))
        return summary(HANDOFF.moved("TAKEN", by=by, at=3))

    def audit(self, *, agent: str | None, since: str | None, until: str | None,
              kinds: list[str]) -> list[dict[str, Any]]:
        self.audits.append({"agent": agent, "since": since, "until": until, "kinds": kinds})
        return AUDIT_ROWS

    def policies(self) -> list[dict[str, Any]]:
        return []

    def operators(self) -> list[dict[str, Any]]:
        return [{"operator_id": "op_9", "name": "bo", "role": "viewer", "redrive_rate": 20.0, "revoked_at": None,
                 "created_at": 1, "updated_by": "reach-cli:x", "key_ids": ["opk_9"]}]

    def create_operator(self, *, name: str, role: str, redrive_rate: float, by: str) -> dict[str, str]:
        self.operator_changes.append(("create", name, by))
        return {"operator_id": "op_10", "name": name, "role": role, "token": "opk_10.s3cret"}

    def revoke_operator(self, operator_id: str, *, by: str) -> dict[str, Any]:
        self.operator_changes.append(("revoke", operator_id, by))
        return {"operator_id": operator_id, "name": "bo", "role": "viewer"}

    def apps(self) -> list[dict[str, Any]]:
        return [{**SHOP, "keys": [{"key_id": "k1", "created_at": 1, "revoked_at": None}]}]

    def set_app_quota(self, app_id: str, *, rate: float | None, burst: int | None, by: str) -> dict[str, Any]:
        self.quotas.append((app_id, rate, burst, by))
        return {**SHOP, "rate": rate or SHOP["rate"], "burst": burst or SHOP["burst"]}

    def start_canary(self, agent_id: str, *, version: str, steps: list[int], step_ms: int, min_success: float,
                     by: str) -> dict[str, Any]:
        self.canary_starts.append({"agent_id": agent_id, "version": version, "steps": steps, "step_ms": step_ms,
                                   "min_success": min_success, "by": by})
        return {"agent_id": agent_id, "version": version, "share": steps[0] / 100}

    def policy_preview(self, scope: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        return {"scope": scope, "changes": dict(changes), "warnings": [], "warnings_before": [],
                "diff": [{"field": k, "before": "-", "before_from": "default", "after": str(v)}
                         for k, v in changes.items()]}

    def set_policy(self, scope: str, changes: Mapping[str, Any], by: str) -> dict[str, Any]:
        self.policy_sets.append((scope, dict(changes), by))
        return {"scope": scope, "fields": {}, "warnings": []}


SHOP: dict[str, Any] = {"app_id": "app_1", "name": "shop", "tenant": "acme", "capabilities": [], "rate": 10.0,
                        "burst": 10, "revoked_at": None, "created_at": 1, "updated_at": 1, "updated_by": "reach-cli:x"}

AUDIT_ROWS = [  # oldest first, as reach.ops.audit.history returns them
    {"at": 1_000, "kind": "JOIN", "subject": "i-1", "agent_id": "agent://a", "instance_id": "i-1", "actor": "i-1",
     "before": None, "after": {"build_version": "1.0.0"}, "source": "registry@0:1"},
    {"at": 2_000, "kind": "INSTANCE", "subject": "INSTANCE:i-1", "agent_id": "agent://a", "instance_id": "i-1",
     "actor": "console:admin", "before": None, "after": {"action": "DRAIN"}, "source": "control@0:4"},
]

MAP = [{"phrase": "weather please", "capability": "weather.forecast", "confidence": 0.75, "source": "feedback"}]
HANDOFF = Handoff(message_id="m-h", trace_id="t-h", tenant="acme", intent="sing me a song", reason="no capability "
                  "scored above 0.25", envelope="AAAA", payload_preview='{"x": 1}', at=1, updated_at=1,
                  candidates=[HandoffCandidate(capability="music.search", score=0.12, source="semantic",
                                               reason="below the lower bound")])


def _receipt(mid: str, status: Status, stage: str | None = None) -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant="acme", capability="weather.forecast", status=status, at=2,
                   resolution=None if stage is None else IntentResolution(stage=stage, intent="weather please"))


# two exact resolutions (one completed, one failed), one semantic still running, one handoff answered by a human
STAGE_RECEIPTS = [_receipt("a", Status.INTENT_RESOLVED, "exact"), _receipt("a", Status.COMPLETED),
                  _receipt("b", Status.FAILED), _receipt("b", Status.INTENT_RESOLVED, "exact"),
                  _receipt("c", Status.INTENT_RESOLVED, "semantic"), _receipt("d", Status.INTENT_RESOLVED, "handoff"),
                  _receipt("d", Status.COMPLETED, "human")]


def _gateway(backend: Backend) -> tuple[TestClient, dict[str, str]]:
    """A gateway whose console runs over `backend`, and a viewer's and an admin's token."""
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    table = OperatorTable(box)
    tokens = {}
    for role in ("viewer", "admin"):
        record, made = new_operator(box, name=role, role=role, redrive_rate=5, now_ms=1, by="t")
        table.apply(record.app_id, record)
        tokens[role] = made.token
    deps = Fakes().deps()
    app = build_gateway(type(deps)(**{**deps.__dict__, "console": Console(operators=table, backend=backend)}),
                        HttpSettings(), closure=ClosureSettings())
    return TestClient(app, follow_redirects=False), tokens


def _serving(monkeypatch: pytest.MonkeyPatch, agent_id: str, capability: str) -> RegistryView:
    """The registry the console backend reads: one instance of `agent_id` serving `capability`."""
    registry = RegistryView()
    registry.apply("i-1", AgentRegistration(agent_id=agent_id, instance_id="i-1", build_version="1.0",
                                            state=AgentState.READY, heartbeat_at=10**15, ttl_ms=10_000,
                                            capabilities=[Capability(name=capability, version="1")],
                                            inbox_topic="t.x"))
    monkeypatch.setattr("reach.console.backend.read_registry", lambda *_a, **_kw: registry)
    return registry


@pytest.fixture
def setup() -> tuple[TestClient, FakeBackend, dict[str, str]]:
    backend = FakeBackend()
    client, tokens = _gateway(backend)
    return client, backend, tokens


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _csrf(client: TestClient) -> str:
    """The CSRF token a logged-in page renders into its logout form."""
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/agents").text)
    assert found is not None, "a logged-in page carries the logout form's CSRF token"
    return found.group(1)


def _cookie(resp: Any) -> str:
    found = re.search(r"reach_console=([^;]+)", resp.headers["set-cookie"])
    assert found is not None
    return found.group(1)


PAGES = ["/console", "/console/agents", "/console/messages", "/console/dead-letters", "/console/routing",
         "/console/intents", "/console/audit",
         "/console/policy", "/console/apps"]
APIS = ["/console/api/whoami", "/console/api/overview", "/console/api/agents", "/console/api/dead-letters",
        "/console/api/weights", "/console/api/canaries", "/console/api/intents", "/console/api/audit",
        "/console/api/policy", "/console/api/apps"]


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
                 ("/console/api/canaries", {"agent_id": "agent://a", "action": "promote"}),
                 ("/console/api/handoffs", {"message_id": "m-h", "action": "take"})]
    for path, body in mutations:
        assert client.post(path, json=body, headers=viewer).status_code == 403, path
    for path in ("/console/agents/action", "/console/dead-letters/redrive", "/console/routing/apply",
                 "/console/routing/canary", "/console/intents/handoff"):
        assert client.post(path, data={"instance_id": "i", "action": "drain"}, headers=viewer).status_code == 403
    assert client.post("/console/api/dead-letters/dry-run", json={"capability": "x"}, headers=viewer).status_code == 200
    assert backend.actions == [] and backend.weights_set == [] and [r[1] for r in backend.redrives] == [True]
    assert backend.handoffs == []


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
    assert client.post("/console/logout", data={"csrf": _csrf(client)}).status_code == 303


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


def test_the_intents_page_shows_the_map_the_stage_shares_and_the_handoff_queue(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer = _bearer(tokens["viewer"])
    data = client.get("/console/api/intents?since=30m", headers=viewer).json()
    assert data["map"] == MAP and data["since"] == "30m"
    stages = data["stats"]["stages"]
    assert data["stats"]["total"] == 4
    assert stages["exact"] == {"resolved": 2, "share": 0.5, "ended": 2, "completed": 1, "human": 0, "success": 0.5}
    assert stages["semantic"]["resolved"] == 1 and stages["semantic"]["success"] is None  # not ended yet
    assert stages["handoff"] == {"resolved": 1, "share": 0.25, "ended": 1, "completed": 1, "human": 1,
                                 "success": 1.0}
    [queued] = data["handoffs"]
    assert queued["message_id"] == "m-h" and queued["state"] == "OPEN" and "envelope" not in queued
    assert queued["candidates"][0]["reason"] == "below the lower bound"
    for unbounded in ("all", "30d"):  # the stats fold holds what it reads: at most the overview's 24 h
        assert client.get(f"/console/api/intents?since={unbounded}", headers=viewer).status_code == 400
    assert len(backend.intents_since) == 1 and backend.intents_since[0] is not None  # nothing read for those
    page = client.get("/console/intents", headers=viewer).text
    for shown in ("weather please", "feedback", "50.0%", "sing me a song", "below the lower bound", "music.search"):
        assert shown in page, shown
    assert 'action="/console/intents/handoff"' not in page  # a viewer gets no take / answer / re-route buttons
    assert "Intents &amp; handoffs" in page and 'href="/console/intents"' in page


def test_an_admin_takes_answers_and_reroutes_a_handoff(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    admin = _bearer(tokens["admin"])
    assert 'action="/console/intents/handoff"' in client.get("/console/intents", headers=admin).text
    taken = client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "take"}, headers=admin)
    assert taken.status_code == 200 and taken.json()["taken_by"] == "console:admin"
    page = client.post("/console/intents/handoff", data={"message_id": "m-h", "action": "answer", "answer": "42"},
                       headers=admin)
    assert page.status_code == 303 and page.headers["location"].startswith("/console/intents?done=")
    client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "reroute", "capability": "music.search"},
                headers=admin)
    assert backend.handoffs == [("m-h", "console:admin", None, None), ("m-h", "console:admin", "42", None),
                                ("m-h", "console:admin", None, "music.search")]
    empty = client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "answer"}, headers=admin)
    assert empty.status_code == 400 and "answer" in empty.json()["message"]
    odd = client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "delete"}, headers=admin)
    assert odd.status_code == 400 and len(backend.handoffs) == 3


def test_a_handoff_move_the_desk_refuses_is_a_400_with_its_reason(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, tokens = setup

    def twice(message_id: str, **_: Any) -> dict[str, Any]:
        return summary(HANDOFF.moved("ANSWERED", by="x", at=2).moved("ANSWERED", by="y", at=3))

    monkeypatch.setattr(backend, "handoff", twice)
    resp = client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "answer", "answer": "1"},
                       headers=_bearer(tokens["admin"]))
    assert resp.status_code == 400 and "cannot become ANSWERED" in resp.json()["message"]
    page = client.post("/console/intents/handoff", data={"message_id": "m-h", "action": "answer", "answer": "1"},
                       headers=_bearer(tokens["admin"]))
    assert page.status_code == 400 and "cannot become ANSWERED" in page.text


def test_the_loser_of_a_handoff_race_gets_a_409(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.intent.errors import HandoffConflict
    client, backend, tokens = setup

    def lost(message_id: str, **_: Any) -> dict[str, Any]:
        raise HandoffConflict(f"Handoff {message_id} is being moved by another operator")

    monkeypatch.setattr(backend, "handoff", lost)
    resp = client.post("/console/api/handoffs", json={"message_id": "m-h", "action": "take"},
                       headers=_bearer(tokens["admin"]))
    assert resp.status_code == 409 and resp.json()["error"] == "conflict"
    assert "another operator" in resp.json()["message"]


def test_the_cookie_is_a_revocable_server_side_session_not_the_operator_token(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    """Issue 28, finding 12: the cookie was the raw long-lived operator token, and logout only deleted it in the
    browser (a copied cookie kept working)."""
    client, _, tokens = setup
    resp = client.post("/console/login", data={"token": tokens["admin"]})
    session_id = _cookie(resp)
    secret = tokens["admin"].partition(".")[2]
    assert tokens["admin"] not in resp.headers["set-cookie"] and secret not in session_id
    assert "max-age=" in resp.headers["set-cookie"].lower()  # it expires
    copied = TestClient(client.app, follow_redirects=False, cookies={"reach_console": session_id})
    assert copied.get("/console/agents").status_code == 200
    assert client.post("/console/logout", data={"csrf": _csrf(client)}).status_code == 303
    assert copied.get("/console/agents").status_code == 303, "a logged-out session id no longer opens the console"
    forged = TestClient(client.app, follow_redirects=False, cookies={"reach_console": tokens["admin"]})
    assert forged.get("/console/agents").status_code == 303, "the token itself is not a cookie"


def test_logout_needs_the_sessions_csrf_token(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, _, tokens = setup
    client.post("/console/login", data={"token": tokens["viewer"]})
    for form in ({}, {"csrf": "guess"}):
        refused = client.post("/console/logout", data=form)
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert client.get("/console/agents").status_code == 200, "a refused logout leaves the session open"
    evil = client.post("/console/logout", data={"csrf": _csrf(client)}, headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403 and client.get("/console/agents").status_code == 200


def test_the_session_cookie_is_secure_over_tls(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, _, tokens = setup
    plain = client.post("/console/login", data={"token": tokens["viewer"]}).headers["set-cookie"].lower()
    tls = TestClient(client.app, base_url="https://testserver", follow_redirects=False)
    secure = tls.post("/console/login", data={"token": tokens["viewer"]}).headers["set-cookie"].lower()
    assert "; secure" in secure and "; secure" not in plain
    assert "httponly" in secure and "samesite=strict" in secure


def test_no_console_page_can_be_framed(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, _, tokens = setup
    for resp in (client.get("/console/login"), client.get("/console/agents", headers=_bearer(tokens["viewer"]))):
        assert resp.status_code == 200
        assert resp.headers["content-security-policy"] == "frame-ancestors 'none'"
        assert resp.headers["x-frame-options"] == "DENY"


@pytest.mark.parametrize("body", [b"[1, 2]", b'"opk_x.y"', b"null", b"{not json"])
def test_a_login_body_that_is_not_a_json_object_is_400_not_500(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], body: bytes) -> None:
    client, _, _ = setup
    tolerant = TestClient(client.app, raise_server_exceptions=False, follow_redirects=False)
    resp = tolerant.post("/console/login", content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and "JSON object" in resp.text


def test_the_audit_page_lists_the_filtered_events_newest_first(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer = _bearer(tokens["viewer"])
    page = client.get("/console/audit?agent=i-1&kind=instance&since=2h", headers=viewer)
    assert page.status_code == 200
    assert [m.group(1) for m in re.finditer(r'class="event" data-kind="([A-Z]+)"', page.text)] == ["INSTANCE", "JOIN"]
    assert "console:admin" in page.text and "1970-01-01 00:00:02" in page.text
    assert '<option value="instance" selected' in page.text
    assert backend.audits[-1] == {"agent": "i-1", "since": "2h", "until": None, "kinds": ["instance"]}
    listed = client.get("/console/api/audit", headers=viewer).json()
    assert backend.audits[-1]["since"] == "24h" and listed["total"] == 2  # the page's default window
    assert [e["at"] for e in listed["events"]] == [2_000, 1_000]


def test_a_bad_audit_filter_is_a_400_that_says_what_it_accepts_and_reads_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[dict[str, Any]] = []
    monkeypatch.setattr(ops_audit, "read_events", lambda **kw: reads.append(kw) or [])
    client, tokens = _gateway(ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(),
                                             redis=RedisSettings()))
    viewer = _bearer(tokens["viewer"])
    for query, expected in (("kind=nonsense", "not an audit kind"), ("since=yesterday-ish", "not understood"),
                            ("since=1h&until=2h", "later than --since"), ("since=2099-01-01", "in the future")):
        resp = client.get(f"/console/api/audit?{query}", headers=viewer)
        assert resp.status_code == 400 and expected in resp.json()["message"], (query, resp.text)
        page = client.get(f"/console/audit?{query}", headers=viewer)
        assert page.status_code == 400 and expected in page.text, query
    assert reads == []
    assert client.get("/console/api/audit?kind=instance&agent=i-1", headers=viewer).json() == {
        "since": "24h", "total": 0, "events": []}
    assert len(reads) == 1 and reads[0]["since_ms"] is not None


POLICY_FORM = {"scope": "demo.echo", "max_attempts": "4", "delivery_timeout_ms": "7s", "handoff": "", "budget_ms": ""}


def test_a_viewer_previews_a_policy_change_and_is_refused_its_apply(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer = _bearer(tokens["viewer"])
    page = client.post("/console/policy/preview", data=POLICY_FORM, headers=viewer)
    assert page.status_code == 200 and 'data-field="delivery_timeout_ms"' in page.text and 'id="apply"' in page.text
    assert 'name="budget_ms"' in page.text and 'type="hidden" name="budget_ms"' not in page.text  # blank: kept
    assert client.post("/console/policy/apply", data=POLICY_FORM, headers=viewer).status_code == 403
    assert client.post("/console/api/policy", json=POLICY_FORM, headers=viewer).status_code == 403
    assert backend.policy_sets == []


def test_an_admin_applies_a_policy_as_console_operator(setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    admin = _bearer(tokens["admin"])
    done = client.post("/console/policy/apply", data=POLICY_FORM, headers=admin)
    assert done.status_code == 303 and "policy" in done.headers["location"]
    assert client.post("/console/api/policy", json={"scope": "*", "handoff": "true"}, headers=admin).status_code == 200
    assert backend.policy_sets == [("demo.echo", {"max_attempts": 4, "delivery_timeout_ms": 7_000}, "console:admin"),
                                   ("*", {"handoff": True}, "console:admin")]


def test_a_bad_policy_form_is_a_400_that_names_the_field_and_changes_nothing(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    admin = _bearer(tokens["admin"])
    for form, expected in (({"delivery_timeout_ms": "7 parsecs"}, "is not a duration"),
                           ({"max_attempts": "lots"}, "not a whole number"),
                           ({"scope": "Not A Capability", "max_attempts": "3"}, "is invalid"),
                           ({"scope": "demo.echo"}, "at least one field")):
        for path in ("/console/api/policy", "/console/api/policy/preview"):
            resp = client.post(path, json=form, headers=admin)
            assert resp.status_code == 400 and expected in resp.json()["message"], (path, form, resp.text)
    assert backend.policy_sets == []


def test_the_console_refuses_a_policy_for_a_capability_nobody_serves_or_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.control_fixtures import memory_control

    published = memory_control(monkeypatch)
    _serving(monkeypatch, "agent://demo/echo", "demo.echo")
    client, tokens = _gateway(ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(),
                                             redis=RedisSettings()))
    admin = _bearer(tokens["admin"])
    typo = client.post("/console/api/policy", json={"scope": "demo.ecko", "max_attempts": "4"}, headers=admin)
    assert typo.status_code == 400 and "not registered by any agent" in typo.json()["message"]
    assert published == []
    done = client.post("/console/api/policy", json=POLICY_FORM, headers=admin).json()
    assert done["fields"]["max_attempts"]["value"] == 4 and published[0].updated_by == "console:admin"
    seen = client.post("/console/api/policy/preview", json={"scope": "demo.echo", "max_attempts": "5"},
                       headers=admin).json()
    assert seen["diff"] == [{"field": "max_attempts", "before": "4", "before_from": "demo.echo", "after": "5"}]
    assert len(published) == 1


def test_a_canary_starts_from_the_routing_page_for_an_admin_only(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer, admin = _bearer(tokens["viewer"]), _bearer(tokens["admin"])
    form = {"agent_id": "agent://demo/echo", "version": "2.0.0", "steps": "10,100", "step": "30s", "min_success": ""}
    assert 'id="canary-start"' in client.get("/console/routing", headers=viewer).text
    assert client.post("/console/routing/canary/start", data=form, headers=viewer).status_code == 403
    assert client.post("/console/api/canaries/start", json=form, headers=viewer).status_code == 403
    assert backend.canary_starts == []
    done = client.post("/console/routing/canary/start", data=form, headers=admin)
    assert done.status_code == 303 and "started" in done.headers["location"]
    assert backend.canary_starts == [{"agent_id": "agent://demo/echo", "version": "2.0.0", "steps": [10, 100],
                                      "step_ms": 30_000, "min_success": 0.95, "by": "console:admin"}]
    for bad, expected in (({"steps": "50,20"}, "must rise strictly"), ({"step": "soon"}, "step 'soon'"),
                          ({"min_success": "high"}, "min_success 'high' is not a number")):
        resp = client.post("/console/api/canaries/start", json={**form, **bad}, headers=admin)
        assert resp.status_code == 400 and expected in resp.json()["message"], (bad, resp.text)
    assert len(backend.canary_starts) == 1


def test_an_admin_changes_an_apps_quota_and_a_viewer_only_sees_it(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer, admin = _bearer(tokens["viewer"]), _bearer(tokens["admin"])
    page = client.get("/console/apps", headers=viewer).text
    assert 'data-app="app_1"' in page and "sealed" not in page and "Quota of shop: 10/s, burst 10 -\\u003e" in page
    assert client.post("/console/apps/quota", data={"app_id": "app_1", "rate": "20"}, headers=viewer).status_code == 403
    assert client.post("/console/api/apps/quota", json={"app_id": "app_1", "rate": 20}, headers=viewer
                       ).status_code == 403
    done = client.post("/console/apps/quota", data={"app_id": "app_1", "rate": "20", "burst": ""}, headers=admin)
    assert done.status_code == 303 and "20" in done.headers["location"]
    for bad, says in (({"rate": "fast"}, "rate 'fast' is not a number"), ({"burst": "1.5"}, "not a whole number"),
                      ({"app_id": ""}, "expected an app_id")):
        resp = client.post("/console/api/apps/quota", json={"app_id": "app_1", **bad}, headers=admin)
        assert resp.status_code == 400 and says in resp.json()["message"], (bad, resp.text)
    assert backend.quotas == [("app_1", 20.0, None, "console:admin")]


def test_the_console_changes_a_quota_with_the_clis_use_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.appstore import AppStore, MemoryAppLog

    log = MemoryAppLog()
    made = AppStore(log=log, box=SecretBox([SecretStr(Fernet.generate_key().decode())]), by="reach-cli:x").create(
        name="shop", tenant="acme", capabilities=[], rate=10, burst=10)
    monkeypatch.setattr("reach.console.backend.KafkaAppLog", lambda **_kw: log)
    client, tokens = _gateway(ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(),
                                             redis=RedisSettings()))
    admin = _bearer(tokens["admin"])
    done = client.post("/console/api/apps/quota", json={"app_id": made.app_id, "rate": "25", "burst": "50"},
                       headers=admin).json()
    assert (done["rate"], done["burst"], done["updated_by"]) == (25.0, 50, "console:admin")
    assert [a["rate"] for a in client.get("/console/api/apps", headers=admin).json()] == [25.0]
    for body, says in (({"app_id": "app_nope", "rate": "5"}, "No app 'app_nope'"),
                       ({"app_id": made.app_id, "rate": "0"}, "is invalid")):
        resp = client.post("/console/api/apps/quota", json=body, headers=admin)
        assert resp.status_code == 400 and says in resp.json()["message"], resp.text
    assert len(log.records) == 2


def test_only_admins_see_and_change_operators_and_a_new_token_is_shown_once(
        setup: tuple[TestClient, FakeBackend, dict[str, str]]) -> None:
    client, backend, tokens = setup
    viewer, admin = _bearer(tokens["viewer"]), _bearer(tokens["admin"])
    assert "/console/operators" not in client.get("/console/agents", headers=viewer).text  # not in a viewer's menu
    for method, path in (("get", "/console/operators"), ("get", "/console/api/operators"),
                         ("post", "/console/operators/create"), ("post", "/console/api/operators"),
                         ("post", "/console/operators/revoke"), ("post", "/console/api/operators/revoke")):
        assert getattr(client, method)(path, headers=viewer).status_code == 403, path
    assert backend.operator_changes == []
    listed = client.get("/console/operators", headers=admin)
    assert listed.status_code == 200 and 'data-operator="op_9"' in listed.text and "opk_9." not in listed.text
    made = client.post("/console/operators/create", data={"name": "cy", "role": "viewer"}, headers=admin)
    assert made.status_code == 200 and "opk_10.s3cret" in made.text and made.headers["cache-control"] == "no-store"
    assert "s3cret" not in client.get("/console/operators", headers=admin).text
    api = client.post("/console/api/operators", json={"name": "cy", "role": "viewer"}, headers=admin)
    assert api.json()["token"] == "opk_10.s3cret" and api.headers["cache-control"] == "no-store"
    done = client.post("/console/operators/revoke", data={"operator_id": "op_9"}, headers=admin)
    assert done.status_code == 303 and "revoked" in done.headers["location"]
    whoami = client.get("/console/api/whoami", headers=admin).json()
    own = client.post("/console/api/operators/revoke", json={"operator_id": whoami["operator_id"]}, headers=admin)
    assert own.status_code == 400 and "your own token" in own.json()["message"]
    bad = client.post("/console/api/operators", json={"name": "cy", "role": "viewer", "redrive_rate": "fast"},
                      headers=admin)
    assert bad.status_code == 400 and "redrive_rate 'fast'" in bad.json()["message"]
    assert backend.operator_changes == [("create", "cy", "console:admin"), ("create", "cy", "console:admin"),
                                        ("revoke", "op_9", "console:admin")]


def test_the_console_creates_and_revokes_operators_with_the_clis_use_case(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.appstore import MemoryAppLog

    log = MemoryAppLog()
    monkeypatch.setattr("reach.console.backend.KafkaAppLog", lambda **_kw: log)
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    backend = ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(),
                             box=box)
    made = backend.create_operator(name="cy", role="viewer", redrive_rate=5, by="console:root")
    table = OperatorTable(box)
    for record in log.records:
        table.apply(record.app_id, record)
    who = table.verify(made["token"])
    assert who is not None and (who.name, who.role.value) == ("cy", "viewer")
    assert log.records[0].updated_by == "console:root" and made["token"] not in str(backend.operators())
    for bad, says in (({"name": "dy", "role": "root"}, "Role 'root' is not one of"),
                      ({"name": "", "role": "viewer"}, "name '' is invalid")):
        with pytest.raises(AppError, match=says):
            backend.create_operator(redrive_rate=5, by="console:root", **bad)
    backend.revoke_operator(made["operator_id"], by="console:root")
    table.apply(made["operator_id"], log.records[-1])
    assert table.verify(made["token"]) is None and backend.operators()[0]["revoked_at"] is not None
    without_key = ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings())
    with pytest.raises(AppError, match="needs the secrets key"):
        without_key.create_operator(name="ey", role="viewer", redrive_rate=5, by="console:root")


def test_an_admin_creates_rotates_and_revokes_an_app_and_each_secret_is_shown_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.appstore import MemoryAppLog

    log = MemoryAppLog()
    monkeypatch.setattr("reach.console.backend.KafkaAppLog", lambda **_kw: log)
    _serving(monkeypatch, "agent://demo/echo", "demo.echo")
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    client, tokens = _gateway(ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(),
                                             redis=RedisSettings(), box=box))
    viewer, admin = _bearer(tokens["viewer"]), _bearer(tokens["admin"])
    form = {"name": "shop", "tenant": "acme", "capabilities": "demo.echo", "rate": "10"}
    for path in ("/console/apps/create", "/console/api/apps/create", "/console/api/apps/rotate",
                 "/console/apps/revoke"):
        assert client.post(path, data=form, headers=viewer).status_code == 403, path
    typo = client.post("/console/api/apps/create", json={**form, "capabilities": "demo.ecko"}, headers=admin)
    assert typo.status_code == 400 and "not registered by any agent" in typo.json()["message"]
    assert log.records == []

    page = client.post("/console/apps/create", data=form, headers=admin)
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    secret = re.search(r'id="made-secret">([^<]+)<', page.text)
    assert secret is not None and secret.group(1) not in client.get("/console/apps", headers=admin).text
    [created] = log.records
    assert (created.rate, created.burst, created.capabilities, created.updated_by) == (10, 10, ["demo.echo"],
                                                                                     "console:admin")
    rotated = client.post("/console/api/apps/rotate", json={"app_id": created.app_id}, headers=admin).json()
    assert rotated["secret"] and rotated["a2a_token"].startswith(rotated["key_id"] + ".rat_")
    first_key = created.keys[0].key_id
    done = client.post("/console/apps/revoke", data={"app_id": created.app_id, "key_id": first_key}, headers=admin)
    assert done.status_code == 303 and "key+revoked" in done.headers["location"]
    gone = client.post("/console/api/apps/revoke", json={"app_id": created.app_id}, headers=admin).json()
    assert gone["revoked_at"] is not None and [k["revoked_at"] is None for k in gone["keys"]] == [False, True]
    again = client.post("/console/api/apps/rotate", json={"app_id": created.app_id}, headers=admin)
    assert again.status_code == 400 and "is revoked" in again.json()["message"]
    assert client.post("/console/api/apps/nonsense", json={}, headers=admin).status_code == 400


def test_an_admin_maps_and_unmaps_an_intent_and_a_viewer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.control_fixtures import memory_control

    published = memory_control(monkeypatch)
    registry = _serving(monkeypatch, "agent://w/f", "weather.forecast")
    monkeypatch.setattr("reach.ops.intents.registry.read_registry", lambda *_a, **_kw: registry)
    removed: list[str] = []
    monkeypatch.setattr("reach.ops.intents.remove_mapping", lambda phrase, **kw: removed.append(kw["by"]) or phrase)
    client, tokens = _gateway(ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(),
                                             redis=RedisSettings()))
    viewer, admin = _bearer(tokens["viewer"]), _bearer(tokens["admin"])
    form = {"phrase": "Rain Tomorrow?", "capability": "weather.forecast", "confidence": "0.9"}
    for path in ("/console/intents/map", "/console/api/intents/map", "/console/api/intents/unmap"):
        assert client.post(path, data=form, headers=viewer).status_code == 403, path
    for bad, says in (({"capability": "weather.forcast"}, "not registered by any agent"),
                      ({"capability": "Weather"}, "is invalid"), ({"confidence": "2"}, "between 0 and 1"),
                      ({"confidence": "sure"}, "confidence 'sure' is not a number"), ({"phrase": " "}, "phrase")):
        resp = client.post("/console/api/intents/map", json={**form, **bad}, headers=admin)
        assert resp.status_code == 400 and says in resp.json()["message"], (bad, resp.text)
    assert published == []
    done = client.post("/console/intents/map", data=form, headers=admin)
    assert done.status_code == 303 and "weather.forecast" in done.headers["location"]
    [record] = published
    assert record.intent is not None and (record.intent.capability, record.updated_by) == ("weather.forecast",
                                                                                           "console:admin")
    gone = client.post("/console/api/intents/unmap", json={"phrase": "rain tomorrow?"}, headers=admin).json()
    assert gone["before"] == "weather.forecast" and removed == ["console:admin"]
    nothing = client.post("/console/api/intents/unmap", json={"phrase": "never mapped"}, headers=admin)
    assert nothing.status_code == 400 and "nothing to remove" in nothing.json()["message"]


def message_page(message_id: str, row: dict[str, Any]) -> str:
    """The message page a viewer sees for a status row (the status table faked)."""
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    table = OperatorTable(box)
    record, made = new_operator(box, name="viewer", role="viewer", redrive_rate=5, now_ms=1, by="t")
    table.apply(record.app_id, record)
    fakes = Fakes()
    fakes.status.rows[message_id] = [{"trace_id": "t1", "tenant": "acme", "generation": 0, "attempt": 1,
                                      "reroutes": 0, "timeline": [], "message_id": message_id, **row}]
    deps = fakes.deps()
    app = build_gateway(type(deps)(**{**deps.__dict__, "console": Console(operators=table, backend=FakeBackend())}),
                        HttpSettings(), closure=ClosureSettings())
    return TestClient(app).get(f"/console/messages?q={message_id}", headers=_bearer(made.token)).text


def test_the_message_page_shows_the_fallback_that_served_it() -> None:
    page = message_page("m1", {"capability": "demo.flaky", "status": "DEAD_LETTERED", "attempt": 2, "fallback": {
        "capability": "demo.echo", "message_id": "m1-fb0", "note": None, "status": "COMPLETED"}})
    assert 'fallback: demo.echo' in page and "<code>m1-fb0</code>" in page and ">COMPLETED<" in page


def test_the_message_page_shows_a_fan_out_and_each_subscribers_delivery() -> None:
    page = message_page("e1", {"capability": "demo.order.created", "status": "FANNED_OUT", "fanout": {"deliveries": [
        {"agent_id": "agent://demo/audit", "message_id": "e1-s0-demo.audit", "status": "COMPLETED"},
        {"agent_id": "agent://demo/notify", "message_id": "e1-s0-demo.notify", "status": None}]}})
    assert "fan-out to 2 subscribers" in page and "<code>e1-s0-demo.notify</code>" in page and ">running<" in page


def test_the_overview_shows_usage_when_requests_reported_some(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, tokens = setup
    plain = backend.overview(0, 1, 1)
    assert 'id="usage"' not in client.get("/console", headers=_bearer(tokens["viewer"])).text
    used = {"capability": "demo.llm", "requests": 2, "input_tokens": 200, "output_tokens": 100, "cost": 0.004,
            "currency": "USD", "cost_per_success": 0.002}
    monkeypatch.setattr(backend, "overview", lambda *_a: {**plain, "usage": [used]})
    page = client.get("/console", headers=_bearer(tokens["viewer"])).text
    assert 'id="usage"' in page and "0.004000 USD" in page and "0.002000" in page


def test_the_agents_page_shows_what_an_agent_serves_depends_on_and_who_owns_it(
        setup: tuple[TestClient, FakeBackend, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, tokens = setup
    monkeypatch.setattr(backend, "agents", lambda: [{
        "agent_id": "agent://doc/answer", "instance_id": "i-1", "state": "READY", "region": None,
        "build_version": "1", "inflight": 0, "max_concurrency": 1, "queued": None, "max_queue": 0,
        "success_1m": None, "p95_ms": None, "breaker": "CLOSED", "arm": None, "heartbeat_age_ms": 10,
        "capabilities": ["doc.answer@1.0.0"], "depends_on": ["doc.search@^2", "doc.rank"],
        "owner": "email:docs-team@example.com"}])
    page = client.get("/console/agents", headers=_bearer(tokens["viewer"])).text
    assert "doc.answer@1.0.0" in page and "depends on doc.search@^2, doc.rank" in page
    assert "owner email:docs-team@example.com" in page
