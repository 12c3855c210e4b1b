"""The demo's answerer: it answers the questions demo.interview asks (and nothing else), again while the status
table has not folded the question yet, and records an answer that never passed."""

from __future__ import annotations

import threading
from typing import Any

from reach.records import Receipt, Status
from reach.tooling.demo import traffic
from reach.tooling.demo.traffic import INTERVIEW, Answerer


def receipt(message_id: str, status: Status, capability: str = INTERVIEW) -> Receipt:
    return Receipt(message_id=message_id, trace_id="t", tenant="acme", capability=capability, status=status, at=1)


def test_questions_of_the_interview_are_answered_once_the_table_has_them(monkeypatch: Any) -> None:
    monkeypatch.setattr(traffic, "ATTEMPTS", 3)
    calls: list[tuple[str, dict[str, Any]]] = []
    stop = threading.Event()

    def answer(message_id: str, value: dict[str, Any]) -> object:
        calls.append((message_id, value))
        if len(calls) >= 5:
            stop.set()  # the last attempt: the run ends after it
        if message_id == "m1" and len([c for c in calls if c[0] == "m1"]) == 1:
            raise RuntimeError("409 not waiting")  # not folded yet: the next attempt passes
        if message_id == "never":
            raise RuntimeError("410 expired")
        return None

    answerer = Answerer(answer)
    for r in (receipt("m1", Status.INPUT_REQUIRED), receipt("m2", Status.STARTED),
              receipt("m3", Status.INPUT_REQUIRED, capability="demo.other"), receipt("never", Status.INPUT_REQUIRED)):
        answerer.heard(r)
    thread = threading.Thread(target=answerer.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(10)
    assert [c[0] for c in calls] == ["m1", "m1", "never", "never", "never"]
    assert all(value == {"name": "Ada"} for _, value in calls)
    assert answerer.answered == 1 and len(answerer.refused) == 1 and "410 expired" in answerer.refused[0]
