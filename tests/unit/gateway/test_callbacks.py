"""`POST /v1/callbacks/{token}` over in-memory fakes: a reply joins its trace; bad tokens and targets are 4xx."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from reach.channels.settings import ClosureSettings
from reach.channels.tokens import ReplyClaims, mint
from reach.envelopes import now_ms
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.records import Capability
from tests.unit.gateway.fakes import LOOPBACK, Fakes

SECRET = b"reply-secret"


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
def client(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("REACH_CALLBACK_SECRET", SECRET.decode())
    monkeypatch.setenv("REACH_CALLBACK_REPLY_CAPABILITIES", "support.answer, nobody.here")
    return TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)


def token(*, capability: str | None = "demo.echo", expires_in_ms: int = 60_000, secret: bytes = SECRET,
          message_id: str = "m1-cb0") -> str:
    return mint(secret, ReplyClaims(message_id=message_id, trace_id="trace-1", tenant="acme",
                                    expires_at=now_ms() + expires_in_ms, capability=capability))


def reply(client: TestClient, tok: str, body: Any) -> Any:
    return client.post(f"/v1/callbacks/{tok}", json=body)


def test_a_reply_becomes_an_envelope_of_the_same_trace(client: TestClient, fakes: Fakes) -> None:
    answer = reply(client, token(), {"text": "yes please"})
    assert answer.status_code == 202, answer.text
    (sent,) = fakes.publisher.sent
    assert (sent.message_id, sent.trace_id, sent.parent_id) == ("m1-cb0-re", "trace-1", "m1-cb0")
    assert (sent.capability, sent.tenant, sent.source) == ("demo.echo", "acme", "gateway:callback")
    assert sent.payload == b'{"text":"yes please"}'
    assert answer.json()["message_id"] == "m1-cb0-re" and answer.json()["trace_id"] == "trace-1"
    assert 'agentreach_gateway_callbacks_total{outcome="accepted"} 1.0' in client.get("/metrics").text


def test_the_reply_may_name_only_an_allowed_capability(client: TestClient, fakes: Fakes) -> None:
    fakes.catalog.capabilities.append(Capability(name="payments.refund", version="1.0.0", input_schema="{}"))
    answer = reply(client, token(), {"capability": "payments.refund", "amount": 1000})
    assert (answer.status_code, answer.json()["error"]) == (403, "forbidden")
    assert "REACH_CALLBACK_REPLY_CAPABILITIES" in answer.json()["message"]
    assert fakes.publisher.sent == []


def test_the_reply_may_name_its_capability_which_must_be_live(client: TestClient, fakes: Fakes) -> None:
    fakes.catalog.capabilities.append(Capability(name="support.answer", version="1.0.0", input_schema="{}"))
    assert reply(client, token(), {"capability": "support.answer", "text": "hi"}).status_code == 202
    assert fakes.publisher.sent[0].capability == "support.answer"
    assert fakes.publisher.sent[0].payload == b'{"text":"hi"}'
    missing = reply(client, token(message_id="m2"), {"capability": "nobody.here", "text": "hi"})
    assert missing.status_code == 404 and missing.json()["error"] == "unknown_capability"


@pytest.mark.parametrize(("capability", "status", "error"), [
    ("../../etc", 400, "bad_request"), ("Bad Name!", 400, "bad_request"), (17, 400, "bad_request"),
    ("channel.sms", 403, "forbidden"),
])
def test_untrusted_input_never_chooses_a_topic(client: TestClient, fakes: Fakes, capability: Any, status: int,
                                               error: str) -> None:
    answer = reply(client, token(), {"capability": capability, "text": "x"})
    assert (answer.status_code, answer.json()["error"]) == (status, error)
    assert fakes.publisher.sent == []


def test_unknown_expired_and_reused_tokens(client: TestClient, fakes: Fakes) -> None:
    unknown = reply(client, token(secret=b"someone-else"), {"text": "x"})
    assert (unknown.status_code, unknown.json()["error"]) == (404, "unknown_token")
    expired = reply(client, token(expires_in_ms=-1), {"text": "x"})
    assert (expired.status_code, expired.json()["error"]) == (410, "expired_token")
    tok = token()
    assert reply(client, tok, {"text": "first"}).status_code == 202
    again = reply(client, tok, {"text": "second"})
    assert (again.status_code, again.json()["error"]) == (409, "token_used")
    assert [e.payload for e in fakes.publisher.sent] == [b'{"text":"first"}']
    metrics = client.get("/metrics").text
    for outcome in ("unknown", "expired", "reused"):
        assert f'agentreach_gateway_callbacks_total{{outcome="{outcome}"}} 1.0' in metrics


def test_bad_bodies_and_no_capability(client: TestClient, fakes: Fakes) -> None:
    assert reply(client, token(), ["not", "an", "object"]).status_code == 400
    assert client.post(f"/v1/callbacks/{token()}", content=b"{nope").status_code == 400
    invalid = reply(client, token(), {"text": 5})  # demo.echo's schema wants a string
    assert (invalid.status_code, invalid.json()["error"]) == (422, "invalid_payload")
    none = reply(client, token(capability=None), {"text": "x"})
    assert (none.status_code, none.json()["error"]) == (422, "no_capability")
    assert fakes.publisher.sent == []


def test_a_default_capability_from_settings(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_CALLBACK_SECRET", SECRET.decode())
    monkeypatch.setenv("REACH_CALLBACK_DEFAULT_CAPABILITY", "demo.echo")
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    assert reply(client, token(capability=None), {"text": "x"}).status_code == 202


def test_a_failed_publish_is_503_and_the_token_stays_usable(client: TestClient, fakes: Fakes) -> None:
    tok = token()
    fakes.publisher.fail = True
    assert reply(client, tok, {"text": "x"}).status_code == 503
    fakes.publisher.fail = False
    assert reply(client, tok, {"text": "x"}).status_code == 202


def test_without_a_secret_the_gateway_takes_no_replies(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REACH_CALLBACK_SECRET", raising=False)
    client = TestClient(build_gateway(fakes.deps(), HttpSettings(), closure=ClosureSettings()),
                        client=LOOPBACK)
    answer = reply(client, token(), {"text": "x"})
    assert (answer.status_code, answer.json()["error"]) == (404, "callbacks_off")
    assert "REACH_CALLBACK_SECRET" in answer.json()["message"]



def test_a_reply_to_a_question_answers_it_once(client: TestClient, fakes: Fakes) -> None:
    """The token of a question (INPUT_REQUIRED, `answers`): the reply is the answer, checked and taken once."""
    from reach.envelopes import new_envelope
    from reach.kafka import codec
    from tests.unit.gateway.test_input_route import INBOX, waiting_row

    asking = new_envelope("demo.interview", {}, tenant="acme")
    fakes.turns.inbox[INBOX] = codec.encode(asking)
    fakes.status.rows[asking.message_id] = [waiting_row(asking.message_id)]
    tok = mint(SECRET, ReplyClaims(message_id=asking.message_id + "-cb0", trace_id="t", tenant="acme",
                                   expires_at=now_ms() + 60_000, capability="demo.interview",
                                   answers=asking.message_id))
    wrong = reply(client, tok, {"nom": "Ada"})
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_answer")
    taken = reply(client, tok, {"name": "Ada"})
    assert taken.status_code == 202 and taken.json()["message_id"] == asking.message_id, taken.text
    [(envelope, _accepted)] = fakes.turns.published
    assert envelope.generation == 1 and fakes.publisher.sent == []  # no new envelope: the message's next turn
    again = reply(client, tok, {"name": "Bob"})
    assert (again.status_code, again.json()["error"]) == (409, "already_answered")
