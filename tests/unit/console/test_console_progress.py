"""The message page shows a running message's progress and partial results (admins see the chunks, viewers their
count, as with the result) and the question a waiting one asks, and refreshes itself until every message shown
has ended."""

from __future__ import annotations

from typing import Any

from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr

from reach.channels.settings import ClosureSettings
from reach.console.operators import OperatorTable
from reach.console.wiring import Console
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.ops.operators import new_operator
from reach.secretbox import SecretBox
from tests.unit.console.test_console_routes import FakeBackend, _bearer
from tests.unit.gateway.fakes import Fakes

CHUNKS = [{"seq": 0, "kind": "text", "data": "Kafka ", "append": True},
          {"seq": 1, "kind": "text", "data": "keeps ", "append": True}]


def page(row: dict[str, Any], role: str) -> str:
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    table = OperatorTable(box)
    record, made = new_operator(box, name=role, role=role, redrive_rate=5, now_ms=1, by="t")
    table.apply(record.app_id, record)
    fakes = Fakes()
    fakes.status.rows["m1"] = [{"message_id": "m1", "trace_id": "t1", "tenant": "acme", "capability": "demo.write",
                                "generation": 0, "attempt": 1, "reroutes": 0, "timeline": [], **row}]
    deps = fakes.deps()
    app = build_gateway(type(deps)(**{**deps.__dict__, "console": Console(operators=table, backend=FakeBackend())}),
                        HttpSettings(), closure=ClosureSettings())
    return TestClient(app).get("/console/messages?q=m1", headers=_bearer(made.token)).text


def test_a_running_message_shows_its_progress_and_the_page_refreshes() -> None:
    running = {"status": "STARTED", "progress": {"attempt": 1, "fraction": 0.4, "note": "writing", "at": 5,
                                                 "chunks": CHUNKS, "next_seq": 2, "dropped": 0}}
    admin = page(running, "admin")
    assert '<span class="fraction">40%</span>' in admin and "writing" in admin
    assert '<li class="chunk" data-seq="0">Kafka </li><li class="chunk" data-seq="1">keeps </li>' in admin
    assert '<meta http-equiv="refresh" content="2">' in admin
    viewer = page(running, "viewer")
    assert "2 partial result(s)" in viewer and "Kafka" not in viewer  # the data is the result's: admins only
    done = page({**running, "status": "COMPLETED", "result": '{"text": "Kafka keeps"}'}, "admin")
    assert 'http-equiv="refresh"' not in done and "Kafka " in done


def test_a_waiting_message_shows_its_question() -> None:
    asking = page({"status": "INPUT_REQUIRED", "input": {"question": "What is your name?", "answer_schema": "{}"}},
                  "viewer")
    assert '<p class="question">asks: What is your name?</p>' in asking
