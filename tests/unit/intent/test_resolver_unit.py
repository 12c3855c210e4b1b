"""The resolver worker's catalog refresh and resolution with an in-memory state and a fake embedder (no broker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reach.envelopes import now_ms
from reach.intent import mappings
from reach.intent.stages import Thresholds
from reach.records import AgentRegistration, AgentState, Capability
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.resolver.resolve_loop import Resolver, ResolverSettings


def _settings(**given: Any) -> dict[str, Any]:
    """What `reach router --role resolve` passes a resolver; a test gives the ones it varies."""
    return {"kafka": KafkaSettings(), "reach": ReachSettings(), "redis": RedisSettings(), "thresholds": Thresholds(),
            "worker_id": ResolverSettings().id, **given}


class LetterEmbedder:
    """A test fake: unit vectors of letter counts (enough to tell the fake catalog's texts apart)."""

    name = "letters"

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for row, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[row, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def _registration(*names: str) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id="i-1", build_version="1",
                             capabilities=[Capability(name=n, version="1.0.0") for n in names],
                             state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=60_000,
                             inbox_topic="t.agent.a.b")


def test_refresh_follows_registrations_and_mappings_and_clears_the_cache() -> None:
    worker = Resolver(**_settings(), embedder=LetterEmbedder)
    worker._embedder = LetterEmbedder()  # what start() does before reading the views
    worker.state.apply_registration("i-1", _registration("weather.forecast", "text.translate"))
    worker.refresh(now_ms())
    assert worker.capabilities == {"weather.forecast", "text.translate"}
    assert worker.resolve("Weather Forecast").stage == "exact"  # seeded from the name
    assert worker.resolve("weather forecast").stage == "exact" and worker.cache.hits == 1
    record = mappings.record("rain soon", "text.translate")
    worker.state.control.apply(record.key, record)
    worker.refresh(now_ms())
    res = worker.resolve("rain soon")
    assert res.stage == "exact" and res.capability == "text.translate" and worker.cache.hits == 1  # cleared
    assert len(worker.latencies_ms) == worker.cache.misses == 2  # a hit costs no resolution


def test_without_the_model_everything_but_the_exact_map_is_handed_off() -> None:
    worker = Resolver(**_settings(), embedder=LetterEmbedder)
    worker.unavailable = "IntentModelMissing: not installed"
    worker.state.apply_registration("i-1", _registration("weather.forecast"))
    worker.refresh(now_ms())
    assert worker.resolve("weather forecast").stage == "exact"
    res = worker.resolve("is it raining")
    assert res.stage == "handoff" and "IntentModelMissing" in res.note


def _worker_with_fakes() -> Any:
    worker = Resolver(**_settings(), embedder=LetterEmbedder)
    worker._embedder = LetterEmbedder()
    worker.state.apply_registration("i-1", _registration("weather.forecast"))
    worker.refresh(now_ms())
    return worker


def test_a_record_that_breaks_the_resolver_is_dead_lettered_and_its_partition_moves_on(monkeypatch: Any) -> None:
    from confluent_kafka import KafkaError

    from reach.envelopes import new_envelope
    from reach.kafka import codec
    from reach.records import DeadLetter
    from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer

    worker = _worker_with_fakes()
    topic = worker.names.intents
    envelope = new_envelope("intent.resolve", {"city": "Lyon"}, intent="weather forecast")
    raw = codec.encode(envelope)
    calls = {"n": 0}
    real = worker._one

    def flaky(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a resolver bug")
        return real(*args)

    monkeypatch.setattr(worker, "_one", flaky)
    huge = b"x" * 400_000  # over the envelope limit: never resolved, never handed off whole
    consumer, producer = FakeConsumer(), FakeProducer()
    messages = [FakeMessage(topic, 0, 5, raw), FakeMessage(topic, 0, 6, raw), FakeMessage(topic, 0, 7, huge)]
    worker._batch(consumer, producer, messages)  # type: ignore[arg-type]
    assert consumer.seeks == [] and consumer.committed_at() == {(topic, 0): 8}  # the partition moved past all three
    letters = [codec.decode(v, DeadLetter) for v in producer.to(worker.names.dlq)]
    assert [(d.reason, d.origin_offset) for d in letters] == [("RESOLVER_ERROR", 5), ("OVERSIZE", 7)]
    assert producer.to(worker.names.capability("weather.forecast"))  # the second copy was resolved and forwarded

    refusing = FakeProducer(refuse=lambda t, _v: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
                            if t == worker.names.capability("weather.forecast") else None)
    consumer = FakeConsumer()
    worker._batch(consumer, refusing, [FakeMessage(topic, 0, 9, raw)])  # type: ignore[arg-type]
    assert consumer.committed_at() == {(topic, 0): 10}
    assert [codec.decode(v, DeadLetter).reason for v in refusing.to(worker.names.dlq)] == ["REFUSED_BY_BROKER"]


def test_the_resolver_merges_into_the_generic_capability_its_registrations_tag() -> None:
    from reach.intent.catalog import GENERIC_TAG
    from reach.intent.stages import Thresholds
    # thresholds no letter-count match can clear: everything the exact map misses is unplaced, and the best
    # two are always of the support family here, so it merges into the member tagged generic
    worker = Resolver(**_settings(thresholds=Thresholds(upper=0.9999, lower=0.9999, fuzzy_floor=0.0)),
                      embedder=LetterEmbedder)
    worker._embedder = LetterEmbedder()
    reg = _registration("support.billing", "support.account")
    reg = reg.model_copy(update={"capabilities": [*reg.capabilities, Capability(
        name="support.general", version="1.0.0", tags=["help", GENERIC_TAG])]})
    worker.state.apply_registration("i-1", reg)
    worker.refresh(now_ms())
    res = worker.resolve("my bill looks wrong and I cannot log in")
    assert res.stage == "fuzzy" and res.capability == "support.general"
    off = Resolver(**_settings(thresholds=Thresholds(upper=0.9999, lower=0.9999, fuzzy=False)), embedder=LetterEmbedder)
    off._embedder = LetterEmbedder()
    off.state.apply_registration("i-1", reg)
    off.refresh(now_ms())
    assert off.resolve("my bill looks wrong and I cannot log in").stage == "handoff"


class Produced:
    """A producer that keeps what it was given."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, _topic: str, value: bytes, **_kw: Any) -> None:
        self.values.append(value)


def test_a_dual_answer_for_a_parent_that_already_ended_republishes_that_ending() -> None:
    from reach.intent.dual import Outcome
    from reach.kafka import codec
    from reach.records import Receipt, Status
    from reach.terminals import Fence, MemorySlots

    slots = MemorySlots()
    worker = Resolver(**_settings(), embedder=LetterEmbedder, fence=Fence(slots, writer="resolver"))
    parent = {"message_id": "p", "trace_id": "t", "tenant": "acme", "capability": "intent.resolve", "generation": 0,
              "intent": "hello", "deadline": 1}
    child = Receipt(message_id="p.a", trace_id="t", tenant="acme", capability="text.echo", status=Status.COMPLETED,
                    at=3, result=b'{"ok": true}')
    answer = Outcome(action="complete", parent=parent, child_id="p.a", capability="text.echo", receipt=child,
                     state=None)
    expired = codec.encode(Receipt(message_id="p", trace_id="t", tenant="acme", capability="intent.resolve",
                                   status=Status.EXPIRED, at=2))
    slots.values[("p", 0)] = expired  # the timekeeper ended the parent at its deadline first
    out = Produced()
    worker._record_outcome(out, answer)  # type: ignore[arg-type]
    assert out.values == [expired]

    slots.values.clear()
    worker._record_outcome(out, answer)  # type: ignore[arg-type]
    won = codec.decode(out.values[-1], Receipt)
    assert won.status is Status.COMPLETED and slots.values[("p", 0)] == out.values[-1]


class _Groups:
    """An in-memory seam for the reply group's description: a list of member lists, one per describe call."""

    def __init__(self, *answers: list[str] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def describe_consumer_groups(self, group_ids: list[str], **_kw: Any) -> dict[str, Any]:
        from concurrent.futures import Future

        from reach.streams.groupadmin import Assignment, GroupDescription, Member

        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        future: Future[Any] = Future()
        if isinstance(answer, Exception):
            future.set_exception(answer)
        else:
            future.set_result(GroupDescription(group_ids[0], "Stable" if answer else "Empty",
                                               [Member(c, Assignment([])) for c in answer]))
        return {group_ids[0]: future}


def test_an_id_a_live_resolver_holds_is_refused_with_who_holds_it() -> None:
    import pytest

    from reach.intent.errors import ResolverIdInUse

    groups = _Groups(["resolver-host-a.host-a.41"])
    worker = Resolver(**_settings(worker_id="host-a"), embedder=LetterEmbedder, groups=lambda: groups)
    with pytest.raises(ResolverIdInUse) as refused:
        worker.check_id_free(wait_s=0.05, every_s=0.01)
    assert "host-a" in str(refused.value) and "resolver-host-a.host-a.41" in str(refused.value)
    assert "REACH_RESOLVER_ID" in str(refused.value) and groups.calls >= 2  # asked again before refusing


def test_a_crashed_holder_whose_session_expires_is_waited_for_and_an_unanswered_check_starts() -> None:
    crashed = _Groups(["resolver-r.h.7"], ["resolver-r.h.7"], [])  # its session expires on the third look
    worker = Resolver(**_settings(worker_id="r"), embedder=LetterEmbedder, groups=lambda: crashed)
    worker.check_id_free(wait_s=5.0, every_s=0.01)
    assert crashed.calls == 3
    silent = _Groups(TimeoutError("no coordinator"))
    Resolver(**_settings(worker_id="r"), embedder=LetterEmbedder, groups=lambda: silent).check_id_free(wait_s=5.0)
    assert silent.calls == 1


def test_of_two_running_workers_with_one_id_the_later_one_stops() -> None:
    import pytest

    from reach.intent.errors import ResolverIdInUse
    from reach.streams.resolver.resolve_loop import _IdWatch, yields_to

    older, newer = "resolver-r.host-a.10.1000", "resolver-r.host-b.20.2000"
    assert yields_to(newer, [older, newer]) == older and yields_to(older, [older, newer]) is None
    assert yields_to(older, [older]) is None  # alone
    tie_a, tie_b = "resolver-r.a.1.5", "resolver-r.b.1.5"
    assert (yields_to(tie_a, [tie_a, tie_b]), yields_to(tie_b, [tie_a, tie_b])) == (None, tie_a)
    assert yields_to(older, [older, "rdkafka"]) == "rdkafka"  # a holder whose start is unknown: it was first

    groups = _Groups([older, newer])
    late = Resolver(**_settings(worker_id="r"), embedder=LetterEmbedder, groups=lambda: groups)
    late.client_id = newer
    watch = _IdWatch(late, now=0.0)
    watch.check(1.0)
    assert groups.calls == 0  # not before ID_RECHECK_S
    watch.check(11.0)  # asks (the future is already answered in this fake) ...
    with pytest.raises(ResolverIdInUse, match="host-a"):
        watch.check(11.1)  # ... and reads the answer on a later turn, without blocking the loop
    first = Resolver(**_settings(worker_id="r"), embedder=LetterEmbedder, groups=lambda: groups)
    first.client_id = older
    kept = _IdWatch(first, now=0.0)
    kept.check(11.0)
    kept.check(11.1)  # the earlier worker keeps the id
    assert kept.pending is None and kept.next_at > 11.1
