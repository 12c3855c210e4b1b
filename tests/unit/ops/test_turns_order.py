"""reach.ops.turns.answer's order over an in-memory TurnStore: the answer's ACCEPTED is acknowledged before the next
turn's envelope is produced, and each failure leaves the message answerable (decisions/0036)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from reach.envelopes import new_envelope
from reach.errors import InfraUnavailable
from reach.kafka import codec
from reach.ops import turns
from reach.records import Status
from tests.unit.gateway.fakes import FakeTurns

INBOX = ("ns.agent.demo.interview", 0, 7)


def setup() -> tuple[str, dict[str, Any], FakeTurns]:
    asking = new_envelope("demo.interview", {}, tenant="acme")
    store = FakeTurns()
    store.inbox[INBOX] = codec.encode(asking)
    row = {"message_id": asking.message_id, "trace_id": "t", "tenant": "acme", "capability": "demo.interview",
           "generation": 0, "status": "INPUT_REQUIRED", "attempt": 1, "deadline": int(time.time() * 1000) + 60_000,
           "input": {"question": "Your name?", "answer_schema": "{}", "turn": 1, "answer": None,
                     "origin_topic": INBOX[0], "origin_partition": INBOX[1], "origin_offset": INBOX[2]}}
    return asking.message_id, row, store


def answer(mid: str, row: dict[str, Any], store: FakeTurns) -> turns.Answered:
    async def rows(_mid: str) -> tuple[int, dict[str, Any]]:
        return 200, row

    return asyncio.run(turns.answer(mid, {"name": "Ada"}, tenant="acme", rows=rows, store=store,
                                    now_ms=int(time.time() * 1000)))


def test_the_answers_accepted_is_acknowledged_before_the_next_turns_envelope() -> None:
    mid, row, store = setup()
    taken = answer(mid, row, store)
    assert taken.generation == 1
    assert store.order == ["receipt:ACCEPTED", "envelope"]
    [(envelope, accepted)] = store.published
    assert (envelope.generation, accepted.generation) == (1, 1)
    assert accepted.input is not None and json.loads(accepted.input.answer or "null") == {"name": "Ada"}


def test_an_unacknowledged_accepted_sends_nothing_and_frees_the_turn() -> None:
    mid, row, store = setup()
    store.fail_receipts = 1
    with pytest.raises(InfraUnavailable):
        answer(mid, row, store)
    assert store.order == [] and store.claims == set()  # the caller may answer again: nothing happened
    assert answer(mid, row, store).generation == 1


def test_an_unacknowledged_envelope_asks_the_question_again_in_the_new_generation() -> None:
    mid, row, store = setup()
    store.fail_envelope = True
    with pytest.raises(InfraUnavailable):
        answer(mid, row, store)
    assert store.order == ["receipt:ACCEPTED", "receipt:INPUT_REQUIRED"] and store.claims == set()
    accepted, again = store.receipts
    assert (again.status, again.generation, again.at >= accepted.at) == (Status.INPUT_REQUIRED, 1, True)
    assert again.input is not None and again.input.question == "Your name?" and again.input.answer is None
    assert (again.input.origin_topic, again.input.origin_offset) == (INBOX[0], INBOX[2])  # answerable again
    store.fail_envelope = False
    waiting = {**row, "generation": 1, "input": again.input.model_dump()}
    assert answer(mid, waiting, store).generation == 2  # the retried answer runs as the next generation
    assert store.order[-2:] == ["receipt:ACCEPTED", "envelope"]
