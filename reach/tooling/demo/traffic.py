"""The demo's traffic: a steady mix of requests, sessions, regions, planned failures and a few bad inputs.

`plan(tick, rate, rng)` (pure) decides what the tick-th request is; `Traffic.run` publishes one plan
per 1/rate seconds to the capability topics, the way an upstream system would (Avro envelopes keyed by
session_key, else message_id), and tells the tally what it sent.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message

from reach.envelopes import new_envelope, new_id, now_ms, routing_key
from reach.kafka import clients, codec
from reach.kafka import headers as h
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from reach.tooling.demo.tally import Sent, Tally

ECHO, FLAKY, NOBODY = "demo.echo", "demo.flaky", "demo.nobody"
ORDER = "demo.order.created"  # subscribe mode: fanned out to agent://demo/audit and agent://demo/notify
WRITE, INTERVIEW = "demo.write", "demo.interview"  # a streamed answer; a question and its answer (two turns)
LEGACY = "demo.legacy"  # no agent serves it: its requests end UNROUTABLE and go on to its POLICY fallback
FALLBACKS = {LEGACY: ECHO}
"""The POLICY `fallback` of each capability that has one, set by the demo before its traffic starts."""
CAPABILITIES = (ECHO, FLAKY, NOBODY, ORDER, WRITE, INTERVIEW, LEGACY)
"""Every capability topic the traffic writes to (created before the router starts)."""
REGIONS = ("eu-west", "us-east")
SESSIONS = 6
UNDECODABLE = b"\x00\x01 this is not an Avro envelope"

EXPECTED: dict[str, Status] = {
    "echo": Status.COMPLETED,
    "echo in a session": Status.COMPLETED,
    "flaky, succeeds": Status.COMPLETED,
    "flaky, fails 1-2x then succeeds": Status.COMPLETED,
    "flaky, business error": Status.FAILED,
    "flaky, always fails (2 attempts)": Status.DEAD_LETTERED,
    "nobody serves it": Status.UNROUTABLE,
    "order event, fanned out to audit + notify": Status.COMPLETED,
    "legacy, served by its fallback (echo)": Status.COMPLETED,  # the tally ends it with its fallback's child
    "nobody serves it, expire_at set": Status.DEAD_LETTERED,
    "bad: undecodable bytes": Status.REJECTED,
    "bad: empty capability": Status.REJECTED,
    "bad: version range": Status.REJECTED,
    "streamed answer (5 chunks)": Status.COMPLETED,
    "two-turn conversation": Status.COMPLETED,
}
"""Every kind of traffic and the terminal status it should end with (the summary checks them)."""

_BAD = ("bad: undecodable bytes", "bad: empty capability", "bad: version range")


@dataclass(frozen=True)
class Planned:
    """One request to publish."""

    kind: str
    capability: str
    payload: dict[str, Any] = field(default_factory=dict)
    version: str = "*"
    region: str | None = None
    session_key: str | None = None
    expire_in_ms: int | None = None
    max_attempts: int = 0


def plan(tick: int, rate: float, rng: random.Random) -> Planned:
    """The tick-th request: about one bad input every 4 s, one unservable request and one order event every 2 s,
    one request to demo.legacy (served by its fallback) every 4 s, a streamed answer and a two-turn conversation
    every 3 s, the rest a weighted mix of echo (some in sessions pinned to a region) and flaky requests. The slots
    differ modulo `per_second` (1/2, -1, 3/4 and 1/4 of it), so at the default rate no kind hides another."""
    per_second = max(1, round(rate))
    if tick % (4 * per_second) == per_second // 2:
        return Planned(kind=_BAD[(tick // (4 * per_second)) % len(_BAD)], capability=ECHO, payload={"n": tick})
    if tick % (2 * per_second) == per_second - 1:
        with_expiry = (tick // (2 * per_second)) % 2 == 1
        return Planned(kind="nobody serves it, expire_at set" if with_expiry else "nobody serves it",
                       capability=NOBODY, payload={"n": tick}, region=rng.choice(REGIONS),
                       expire_in_ms=600_000 if with_expiry else None)
    if tick % (4 * per_second) == 3 * per_second + (3 * per_second) // 4:  # before the order slot: at 1 req/s
        return Planned(kind="legacy, served by its fallback (echo)", capability=LEGACY,  # they share odd ticks
                       payload={"n": tick, "text": "for the old system"})
    if tick % (2 * per_second) == (per_second + per_second // 2) % (2 * per_second):
        return Planned(kind="order event, fanned out to audit + notify", capability=ORDER,
                       payload={"order_id": f"o-{tick}", "amount": tick % 100})
    if tick % (3 * per_second) == per_second // 4:  # one every 3 s: the writer streams its answer
        return Planned(kind="streamed answer (5 chunks)", capability=WRITE, payload={"topic": f"tick {tick}"})
    if tick % (3 * per_second) == per_second + per_second // 4:  # one every 3 s: the interview asks, the demo answers
        return Planned(kind="two-turn conversation", capability=INTERVIEW, payload={})
    region = rng.choice((*REGIONS, None))
    draw = rng.random()
    if draw < 0.35:
        return Planned(kind="echo", capability=ECHO, payload={"n": tick, "text": "hello"}, version="^1.0",
                       region=region)
    if draw < 0.60:
        session = rng.randrange(SESSIONS)
        return Planned(kind="echo in a session", capability=ECHO, payload={"n": tick, "session": session},
                       version="^1.0", region=REGIONS[session % len(REGIONS)], session_key=f"session-{session}")
    if draw < 0.72:
        return Planned(kind="flaky, succeeds", capability=FLAKY, payload={"n": tick}, region=region)
    if draw < 0.87:
        return Planned(kind="flaky, fails 1-2x then succeeds", capability=FLAKY,
                       payload={"n": tick, "fail_times": rng.choice((1, 2))}, region=region)
    if draw < 0.95:
        return Planned(kind="flaky, business error", capability=FLAKY, payload={"business_error": True},
                       region=region)
    return Planned(kind="flaky, always fails (2 attempts)", capability=FLAKY, payload={"fail_times": 99},
                   region=region, max_attempts=2)


class Traffic:
    """Publishes the planned mix at `rate` requests per second until stopped."""

    def __init__(self, *, names: Names, tally: Tally, rate: float, kafka: KafkaSettings | None = None,
                 seed: int | None = None) -> None:
        self.names = names
        self.tally = tally
        self.rate = rate
        self.rng = random.Random(seed)
        self.producer = clients.producer(kafka or KafkaSettings(), profile="hot")
        self.delivery_errors: list[str] = []

    def run(self, stop: threading.Event) -> None:
        """Publish until `stop` is set, then wait for the broker to acknowledge what is queued."""
        start, tick = time.monotonic(), 0
        while not stop.is_set():
            self.publish(plan(tick, self.rate, self.rng))
            tick += 1
            stop.wait(max(0.0, start + tick / self.rate - time.monotonic()))
        self.producer.flush(15)

    def publish(self, planned: Planned) -> str:
        """Encode and produce one request (bad inputs on purpose included); returns its message_id."""
        envelope = new_envelope(
            planned.capability, planned.payload, version=planned.version, region=planned.region,
            session_key=planned.session_key, source="reach-demo", max_attempts=planned.max_attempts,
            expire_at=now_ms() + planned.expire_in_ms if planned.expire_in_ms else None,
        )
        value = codec.encode(envelope)
        if planned.kind == "bad: undecodable bytes":
            envelope = envelope.model_copy(update={"message_id": new_id()})
            value = UNDECODABLE
        elif planned.kind == "bad: empty capability":
            value = codec.encode(envelope.model_copy(update={"capability": ""}))
        elif planned.kind == "bad: version range":
            value = codec.encode(envelope.model_copy(update={"capability_version": "not a range"}))
        self.tally.sent(envelope.message_id, Sent(planned.kind, envelope.created_at, planned.session_key,
                                                 EXPECTED[planned.kind].value, FALLBACKS.get(planned.capability)))
        self.producer.produce(self.names.capability(planned.capability), value=value,
                              key=routing_key(envelope).encode(),
                              headers=[(h.MESSAGE_ID, envelope.message_id.encode())],
                              on_delivery=self._delivered)
        self.producer.poll(0)
        return envelope.message_id

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.delivery_errors.append(str(err))


ATTEMPTS = 20


class Answerer:
    """The person of the two-turn conversations: answers each question demo.interview asks (INPUT_REQUIRED) with a
    name, through the same use case as `reach answer`; the message then completes as its next generation."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], object]) -> None:
        self._answer = answer
        self._asked: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.answered = 0
        self.refused: list[str] = []

    def heard(self, receipt: Receipt) -> None:
        """Every receipt the follower reads: a question of demo.interview is queued for an answer."""
        if receipt.status is Status.INPUT_REQUIRED and receipt.capability == INTERVIEW:
            self._asked.put(receipt.message_id)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                message_id = self._asked.get(timeout=0.2)
            except queue.Empty:
                continue
            for attempt in range(ATTEMPTS):  # the follower may read the question before the status table folds it
                try:
                    self._answer(message_id, {"name": "Ada"})
                    self.answered += 1
                    break
                except Exception as exc:  # noqa: BLE001 - the summary shows the conversation did not end as planned
                    if attempt == ATTEMPTS - 1:
                        self.refused.append(f"{message_id}: {exc}"[:300])
                    elif stop.wait(0.25):
                        return
