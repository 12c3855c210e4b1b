"""The capability allow-list holds through callbacks and reply tokens, and replies are metered (issue 28,
findings 1 and 2): an app cannot mint a reply token naming a capability it may not call, sets a `callback` only
when its list allows channel.webhook, and `POST /v1/callbacks/{token}` takes a token of the tenant's bucket."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from reach.callers import KeyEntry
from reach.channels.settings import ClosureSettings
from reach.channels.tokens import ReplyClaims, mint
from reach.envelopes import now_ms
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.records import Capability
from tests.unit.gateway.fakes import LOOPBACK, Fakes, app
from tests.unit.gateway.test_service import post

SECRET = b"reply-secret"
HOOK = Capability(name="channel.webhook", version="1.0.0", input_schema="{}")


@pytest.fixture
def fakes() -> Fakes:
    fakes = Fakes()
    fakes.catalog.capabilities.append(HOOK)
    fakes.directory.keys["hook"] = KeyEntry("hook", app("hooks", capabilities=("channel.webhook",)), b"s-hook")
    fakes.directory.keys["echo"] = KeyEntry("echo", app("echoes", capabilities=("demo.echo",)), b"s-echo")
    fakes.directory.keys["both"] = KeyEntry("both", app("both", capabilities=("demo.echo", "channel.webhook")),
                                            b"s-both")
    return fakes


def test_a_reply_token_may_name_only_a_capability_the_app_may_call(fakes: Fakes) -> None:
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    payload = {"endpoint": "https://me.example/inbox", "body": {"text": "refund?"}}
    for named in ({"reply_capability": "billing.refund"},
                  {"callback_for": {"message_id": "x", "generation": 0, "capability": "billing.refund"}}):
        resp = post(client, "/v1/envelopes", {"capability": "channel.webhook", "payload": {**payload, **named}},
                    key="hook", secret=b"s-hook")
        assert (resp.status_code, resp.json()["error"]) == (403, "forbidden"), resp.text
        assert "billing.refund" in resp.json()["message"]
    assert fakes.publisher.sent == []
    resp = post(client, "/v1/envelopes", {"capability": "channel.webhook", "payload": payload}, key="hook",
                secret=b"s-hook")
    assert resp.status_code == 202, resp.text  # naming nothing (or a capability it may call) is fine


def test_a_callback_needs_channel_webhook_on_an_app_with_a_capability_list(fakes: Fakes) -> None:
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    request = {"capability": "demo.echo", "payload": {"text": "x"}, "callback": "https://me.example/done"}
    resp = post(client, "/v1/envelopes", request, key="echo", secret=b"s-echo")
    assert (resp.status_code, resp.json()["error"]) == (403, "forbidden") and "channel.webhook" in resp.text
    assert post(client, "/v1/envelopes", request, key="both", secret=b"s-both").status_code == 202
    assert post(client, "/v1/envelopes", request).status_code == 202  # no list: every capability, callbacks too
    assert len(fakes.publisher.sent) == 2


def test_replies_are_metered_per_tenant(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_CALLBACK_SECRET", SECRET.decode())
    monkeypatch.setenv("REACH_CALLBACK_RATE", "0.001")
    monkeypatch.setenv("REACH_CALLBACK_BURST", "2")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)

    def token(message_id: str, tenant: str = "acme") -> str:
        return mint(SECRET, ReplyClaims(message_id=message_id, trace_id="t", tenant=tenant,
                                        expires_at=now_ms() + 60_000, capability="demo.echo"))

    answers = [client.post(f"/v1/callbacks/{token(f'm{i}-cb0')}", json={"text": "y"}) for i in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 429]
    assert answers[2].json()["error"] == "quota_exceeded" and int(answers[2].headers["Retry-After"]) >= 1
    assert client.post(f"/v1/callbacks/{token('m9-cb0', 'globex')}", json={"text": "y"}).status_code == 202
    assert len(fakes.publisher.sent) == 3
    assert 'agentreach_gateway_callbacks_total{outcome="limited"} 1.0' in client.get("/metrics").text
    # the refused token was not spent: once the bucket refills, the same reply is accepted
    fakes.quotas.buckets.clear()
    assert client.post(f"/v1/callbacks/{token('m2-cb0')}", json={"text": "y"}).status_code == 202
