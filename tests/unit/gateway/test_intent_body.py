"""The gateway body's `intent`: an intent.resolve envelope carrying it, with no capability contract to check."""

from __future__ import annotations

from fastapi.testclient import TestClient

from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes
from tests.unit.gateway.test_service import post


def test_an_intent_is_accepted_and_an_intent_envelope_without_one_is_400() -> None:
    fakes = Fakes()
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))
    resp = post(client, "/v1/envelopes", {"capability": "intent.resolve", "intent": "will it rain in Lyon",
                                          "payload": {}})
    assert resp.status_code == 202, resp.text
    [envelope] = fakes.publisher.sent
    assert (envelope.capability, envelope.intent) == ("intent.resolve", "will it rain in Lyon")
    missing = post(client, "/v1/envelopes", {"capability": "intent.resolve", "payload": {}})
    assert missing.status_code == 400 and "intent" in missing.json()["message"]


def test_an_app_held_to_a_capability_list_may_not_send_intents() -> None:
    from reach.callers import KeyEntry
    from tests.unit.gateway.fakes import app

    fakes = Fakes()
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))
    fakes.directory.keys["narrow"] = KeyEntry("narrow", app("narrow", capabilities=("intent.resolve", "demo.echo")),
                                              b"s-narrow")
    resp = post(client, "/v1/envelopes", {"capability": "intent.resolve", "intent": "refund my order",
                                          "payload": {}}, key="narrow", secret=b"s-narrow")
    assert resp.status_code == 403 and "an intent may resolve to any capability" in resp.json()["message"]
    assert fakes.publisher.sent == []
