"""`callback_progress` on POST /v1/envelopes: the message's progress goes to its callback URL through a push config
kept before the envelope is published (states left to the callback itself); without a callback, or on a gateway
without push configs, it is refused 400 and nothing is sent."""

from __future__ import annotations

import dataclasses

from fastapi.testclient import TestClient

from reach.a2a.pushbook import MemoryPushBook
from reach.channels.settings import ClosureSettings
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.intake import PROGRESS_CONFIG
from reach.gateway.service import build_gateway
from tests.unit.gateway.fakes import Fakes
from tests.unit.gateway.test_service import post

HOOK = "https://me.example/progress"


def test_progress_is_kept_for_the_callback_before_the_message_is_sent() -> None:
    fakes, book = Fakes(), MemoryPushBook()
    client = TestClient(build_gateway(dataclasses.replace(fakes.deps(), push=book), HttpSettings(),
                                      closure=ClosureSettings()))
    resp = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "x"}, "callback": HOOK,
                                          "callback_progress": True})
    assert resp.status_code == 202, resp.text
    mid = resp.json()["message_id"]
    kept = book.get(mid)
    assert kept is not None and kept.tenant == "acme"
    [config] = kept.configs
    assert (config.id, config.url, config.states, config.progress) == (PROGRESS_CONFIG, HOOK, False, True)
    assert fakes.publisher.sent[0].callback == HOOK  # the ending still comes as the callback
    plain = post(client, "/v1/envelopes", {"capability": "demo.echo", "payload": {"text": "y"}, "callback": HOOK})
    assert book.get(plain.json()["message_id"]) is None


def test_without_a_callback_or_push_configs_it_is_refused() -> None:
    fakes = Fakes()
    off = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()))
    resp = post(off, "/v1/envelopes", {"capability": "demo.echo", "payload": {}, "callback": HOOK,
                                       "callback_progress": True})
    assert (resp.status_code, resp.json()["error"]) == (400, "progress_off") and "reach topics apply" in resp.text
    on = TestClient(build_gateway(dataclasses.replace(fakes.deps(), push=MemoryPushBook()), HttpSettings(),
                                  closure=ClosureSettings()))
    resp = post(on, "/v1/envelopes", {"capability": "demo.echo", "payload": {}, "callback_progress": True})
    assert (resp.status_code, resp.json()["error"]) == (400, "bad_request") and "needs a callback" in resp.text
    assert fakes.publisher.sent == []
