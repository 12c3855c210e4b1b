"""The health writer on the real broker: a sick instance's breaker opens, probes, closes and is restored gradually,
and a writer restart continues from `<ns>.health` instead of starting afresh.

A route worker and a status worker (the writer runs with the status role), one echo instance and one sick
instance (examples/sick_agent.py, fail rate 1.0, healed through its REACH_SICK_FILE), under steady traffic.
Short health settings come in through REACH_HEALTH_*.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reach.client import Client
from reach.kafka import codec
from reach.names import Names
from reach.records import BreakerState, InstanceHealth
from reach.settings import ReachSettings
from tests.integration.agent_support import TopicReader, spawn, wait_for
from tests.integration.stream_app import StreamApp

SICK, ECHO = "agent://demo/sick", "agent://demo/echo"
SHORT = {"REACH_HEALTH_OPEN_MS": "3000", "REACH_HEALTH_RESTORE_STEP_MS": "15000", "REACH_HEALTH_REPLAY_MS": "60000",
         "REACH_HEALTH_EMIT_INTERVAL_MS": "500"}


class Health(TopicReader):
    """`<ns>.health` decoded, with each record's offset (a restarted writer's records come after the old ones)."""

    def of(self, instance_id: str) -> list[tuple[int, InstanceHealth]]:
        return [(r.offset, codec.decode(r.value, InstanceHealth)) for r in self.poll(0.2)
                if r.key == instance_id.encode() and r.value is not None]

    def first(self, instance_id: str, after: int = -1, **want: object) -> tuple[int, InstanceHealth] | None:
        for offset, record in self.of(instance_id):
            if offset > after and all(getattr(record, k) == v for k, v in want.items()):
                return offset, record
        return None


@contextmanager
def traffic(per_second: float = 20) -> Iterator[list[str]]:
    """Requests for demo.echo at a steady rate until the block ends; yields the sent message ids."""
    sent: list[str] = []
    stop = threading.Event()

    def run() -> None:
        with Client() as client:
            while not stop.wait(1 / per_second):
                sent.append(client.send("demo.echo", {"n": len(sent)}))

    thread = threading.Thread(target=run, name="traffic", daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(10)


def test_sick_instance_opens_probes_recovers_gradually_and_survives_a_writer_restart(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SHORT.items():
        monkeypatch.setenv(name, value)
    sick_file = tmp_path / "sick.json"
    sick_file.write_text(json.dumps({"fail_rate": 1.0}))
    route, status = StreamApp(tmp_path, role="route"), StreamApp(tmp_path, role="status")
    monkeypatch.setenv("REACH_WEB_PORT", str(route.port))
    route.start()
    status.start()
    agents = [spawn("examples.echo_agent:agent"), spawn("examples.sick_agent:agent", REACH_SICK_FILE=str(sick_file))]
    health = Health(Names(ReachSettings().namespace).health)
    try:
        def both_ready() -> dict[str, str] | None:
            found = {a["agent_id"]: a["instance_id"] for a in route.get("/agents") if a["state"] == "READY"}
            return found if set(found) == {SICK, ECHO} else None

        ready = wait_for(both_ready, 60, "echo and sick READY")
        sick, echo = ready[SICK], ready[ECHO]
        began = time.time() * 1000
        with traffic() as sent:
            _, opened = wait_for(lambda: health.first(sick, breaker=BreakerState.OPEN), 30, "the sick breaker OPEN")
            assert opened.admit == 0.0 and opened.open_until is not None and opened.open_until > opened.at
            assert opened.consecutive_failures >= 1 and (opened.success_1m or 0) < 0.5
            assert "failed" in (opened.reason or "")
            # the route worker follows <ns>.health into RouterState.health and shows it on GET /agents
            wait_for(lambda: any(a["instance_id"] == sick and a["breaker"] in ("OPEN", "HALF_OPEN")
                                 for a in route.get("/agents")), 30, "the breaker on the router's /agents")
            _, probing = wait_for(lambda: health.first(sick, breaker=BreakerState.HALF_OPEN), 30, "HALF_OPEN")
            assert probing.at >= opened.open_until and probing.admit == pytest.approx(0.1)

            sick_file.write_text(json.dumps({"fail_rate": 0.0}))  # it recovers: the next probes succeed
            closed_at, closed = wait_for(lambda: health.first(sick, breaker=BreakerState.CLOSED, restore_step=0), 60,
                                         "CLOSED after probes, restoring at 10%")
            assert closed.admit == pytest.approx(0.1) and closed.weight == 1.0 and closed.step_started_at

            restart = time.time() * 1000
            status.stop()  # the writer goes (flushing what it wrote) ...
            before = max(offset for offset, _ in health.of(sick))
            status.start()  # ... and its successor restores the instance from the topic, not afresh
            _, resumed = wait_for(lambda: health.first(sick, after=before), 60, "a record from the restarted writer")
            assert resumed.breaker is BreakerState.CLOSED and resumed.restore_step in (0, 1), resumed
            if resumed.restore_step == 0:
                assert resumed.step_started_at == closed.step_started_at and resumed.admit == pytest.approx(0.1)
            print(f"health timeline: OPEN {opened.at - began:.0f} ms after traffic began; HALF_OPEN at +"
                  f"{probing.at - opened.at} ms; writer restart -> its first record {resumed.at - restart:.0f} ms")
            _, half = wait_for(lambda: health.first(sick, after=closed_at, restore_step=1), 60, "restore at 50%")
            assert half.admit == pytest.approx(0.5)
            _, whole = wait_for(lambda: health.first(sick, after=closed_at, restore_step=None,
                                                     breaker=BreakerState.CLOSED), 60, "fully restored")
            assert whole.admit == 1.0 and whole.weight == 1.0 and (whole.success_1m or 0) > 0
        assert sent
        assert all(r.breaker is BreakerState.CLOSED for _, r in health.of(echo))  # the healthy one never opened
        assert health.of(echo), "the healthy instance has health records too"
        assert status.get("/healthz")["health"] == "running"
        metrics = status.text("/metrics")
        assert f'agentreach_instance_breaker_state{{agent_id="{SICK}",instance_id="{sick}"}} 0.0' in metrics
    finally:
        for proc in agents:
            proc.terminate()
            proc.wait(60)
        health.close()
        status.stop()
        route.stop()


def test_two_writers_split_the_partitions_and_hand_instances_over_with_their_state(namespace: str) -> None:
    """In process, receipts produced directly: a second writer takes over half the partitions, the first
    gives them up, and an OPEN breaker stays OPEN across the hand-over (restored, not reset)."""
    from confluent_kafka import Producer

    from reach.core.healthmodel.settings import HealthSettings
    from reach.envelopes import now_ms
    from reach.records import ErrorInfo, Receipt, Status
    from reach.settings import KafkaSettings
    from reach.streams.health import HealthWriter
    from reach.streams.status.lookup import partition_of

    names = Names(namespace)
    settings = HealthSettings(open_ms=600_000, replay_ms=60_000, emit_interval_ms=200)
    kafka = KafkaSettings()
    producer = Producer(kafka.producer())
    ids = [f"inst-{n}" for n in range(8)]
    by_partition = {p: [i for i in ids if partition_of(i, 2) == p] for p in (0, 1)}
    assert by_partition[0] and by_partition[1]
    sick = by_partition[0][0], by_partition[1][0]

    def fail(instance: str, count: int) -> None:
        for n in range(count):
            receipt = Receipt(message_id=f"{instance}-{now_ms()}-{n}", trace_id="t", tenant="d", capability="demo.echo",
                              agent_id="agent://demo/sick", instance_id=instance, status=Status.ATTEMPT_FAILED,
                              at=now_ms(), error=ErrorInfo(kind="TRANSIENT", code="SICK", message="sick"))
            producer.produce(names.receipts, key=receipt.message_id, value=codec.encode(receipt))
        producer.flush(10)

    health = Health(names.health)
    first = HealthWriter(names=names, kafka=kafka, settings=settings)
    second = HealthWriter(names=names, kafka=kafka, settings=settings)
    first.start()
    try:
        wait_for(lambda: first.owned == {0, 1} and not first.replaying, 60, "the first writer owning both partitions")
        for instance in sick:
            fail(instance, 10)
        try:
            opened = {i: wait_for(lambda i=i: health.first(i, breaker=BreakerState.OPEN), 60, f"{i} OPEN")[1]
                      for i in sick}
        except AssertionError as exc:
            raise AssertionError(f"{exc}; writer: owned {first.owned}, replaying {first.replaying}, error "
                                 f"{first.error!r}, calls {first.table.calls}, published {first.published}") from None
        second.start()
        overlaps: list[set[int]] = []

        def split() -> bool:
            both = first.owned & second.owned
            if both:
                overlaps.append(both)
            return bool(first.owned) and bool(second.owned) and first.owned | second.owned == {0, 1}

        wait_for(split, 60, "the two writers splitting the partitions", interval=0.02)
        assert not overlaps, f"both writers owned {overlaps}"
        wait_for(lambda: not first.replaying and not second.replaying, 60, "both writers replayed")
        owner = {p: first if p in first.owned else second for p in (0, 1)}
        for instance in sick:
            tracker = owner[partition_of(instance, 2)].table.trackers[instance]
            assert tracker.breaker.state is BreakerState.OPEN
            assert tracker.breaker.open_until == opened[instance].open_until  # restored from the topic, not reset
        assert first.error is None and second.error is None
        second.stop()  # it leaves the group: the first writer takes its partitions back, with their state
        wait_for(lambda: first.owned == {0, 1} and not first.replaying, 60, "the first writer owning both again")
        assert all(first.table.trackers[i].breaker.open_until == opened[i].open_until for i in sick)
    finally:
        second.stop()
        first.stop()
        health.close()
