"""Breaker-aware routing on the real broker: OPEN instances get nothing, all OPEN fails fast, slow sole serves longer.

The first test runs end to end: the stream app (router, delay tiers, and the health writer folding
receipts into `<ns>.health`), examples/echo_agent.py and examples/sick_agent.py. The others write
InstanceHealth to `<ns>.health` with a producer, as the health writer would, and hold the router's
side of the contract on its own (the exact states they need, without waiting for the rules).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reach import control
from reach.client import Client
from reach.envelopes import new_envelope, now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import AgentState, BreakerState, Envelope, InstanceHealth, Policy, Receipt, Status
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, TopicReader, spawn
from tests.integration.router_helpers import (
    Instance,
    Sender,
    Tail,
    Worker,
    ensure,
    first_per_message,
    produce,
    receipts_tail,
    running_router,
    sees,
    wait_for,
)
from tests.integration.stream_app import StreamApp
from tests.integration.test_health_writer import traffic


def publish_health(names: Names, instance: Instance, **fields: object) -> InstanceHealth:
    record = InstanceHealth(instance_id=instance.instance_id, agent_id=instance.agent_id, at=now_ms(), **fields)  # type: ignore[arg-type]
    produce(names.health, instance.instance_id, codec.encode(record))
    return record


SICK = "agent://demo/sick"
MIN_SAMPLE = 30  # requests in a phase before its share is compared (~160 at 20/s over an 8 s step)


@contextmanager
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, str],
          agents: dict[str, dict[str, str]]) -> Iterator[tuple[StreamApp, dict[str, str]]]:
    """`settings` in the environment, a stream app (router, delay tiers, health writer) and agent processes
    (target -> extra environment); yields the app and agent_id -> instance_id once every agent is READY."""
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    app = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(app.port))
    app.start()
    procs = [spawn(target, **env) for target, env in agents.items()]
    try:
        ready = wait_for(lambda: (lambda f: f if len(f) == len(agents) else None)(
            {a["agent_id"]: a["instance_id"] for a in app.get("/agents") if a["state"] == "READY"}), 60,
            "every agent READY")
        yield app, ready
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(60)
        app.stop()


def test_end_to_end_the_breaker_opens_and_the_sick_instance_gets_nothing(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    receipts = Receipts(Names(namespace).receipts)
    with stack(tmp_path, monkeypatch, {"REACH_HEALTH_OPEN_MS": "20000"},  # long enough to watch OPEN whole
               {"examples.echo_agent:agent": {}, "examples.sick_agent:agent": {}}) as (app, ready):
        sick = ready[SICK]
        with traffic() as sent:
            wait_for(lambda: any(a["instance_id"] == sick and a["breaker"] == "OPEN" for a in app.get("/agents")),
                     60, "the router seeing the sick instance's breaker OPEN")
            seen_open = now_ms()
            after = len(sent)  # requests sent from here on meet a router that knows the breaker is OPEN
            wait_for(lambda: len(sent) >= after + 60, 30, "60 more requests sent")
        ids = list(sent)
        done = wait_for(lambda: (lambda m: m if all(any(r.status.is_terminal for r in m.get(i, [])) for i in ids)
                                 else None)(receipts.by_message()), 90, "a terminal receipt for every request")
        terminal = {i: next(r for r in done[i] if r.status.is_terminal) for i in ids}
        assert {r.status for r in terminal.values()} == {Status.COMPLETED}, "retries of the sick one's failures " \
            "went to the healthy instance"
        failed_on_sick = [r for rs in done.values() for r in rs if r.status is Status.ATTEMPT_FAILED
                          and r.instance_id == sick]
        assert failed_on_sick, "the sick instance took requests (and failed them) before its breaker opened"
        health = TopicReader(Names(namespace).health)
        opened = [codec.decode(r.value, InstanceHealth) for r in health.poll(1.0) if r.key == sick.encode() and r.value]
        health.close()
        open_until = min(h.open_until for h in opened if h.breaker is BreakerState.OPEN and h.open_until)
        assert open_until > seen_open, "the OPEN window outlasts the moment the router showed it"
        late: list[Receipt] = [r for i in ids[after:] for r in done[i]
                               if r.status is Status.ROUTED and r.at < open_until]
        assert late and all(r.instance_id != sick for r in late), "no new request and no retry reached it while OPEN"
    receipts.close()


@pytest.mark.serial  # the probe and restore phases last seconds each: starved traffic can miss one entirely
def test_end_to_end_a_recovered_instance_is_probed_then_restored_gradually(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names(namespace)
    sick_file = tmp_path / "sick.json"
    sick_file.write_text(json.dumps({"fail_rate": 1.0}))
    health = TopicReader(names.health)
    receipts = Receipts(names.receipts)
    with stack(tmp_path, monkeypatch, {"REACH_HEALTH_OPEN_MS": "3000", "REACH_HEALTH_RESTORE_STEP_MS": "8000",
                                       "REACH_HEALTH_EMIT_INTERVAL_MS": "500"},
               {"examples.echo_agent:agent": {}, "examples.sick_agent:agent": {"REACH_SICK_FILE": str(sick_file)}}
               ) as (_app, ready):
        sick = ready[SICK]

        def timeline() -> list[InstanceHealth]:
            return [codec.decode(r.value, InstanceHealth) for r in health.poll(0.2)
                    if r.key == sick.encode() and r.value]

        with traffic() as sent:
            wait_for(lambda: any(h.breaker is BreakerState.OPEN for h in timeline()), 60, "the sick breaker OPEN")
            sick_file.write_text(json.dumps({"fail_rate": 0.0}))
            wait_for(lambda: any(h.breaker is BreakerState.CLOSED and h.admit == 1.0 and h.restore_step is None
                                 and h.at > max(o.at for o in timeline() if o.breaker is BreakerState.OPEN)
                                 for h in timeline()), 90, "the sick instance fully restored")
            restored = max(h.at for h in timeline())
            wait_for(lambda: now_ms() > restored + 5_000 and len(sent) > 0, 30, "traffic after the restore")
        records = sorted(timeline(), key=lambda h: h.at)
        routed = [r for rs in receipts.by_message().values() for r in rs if r.status is Status.ROUTED]

        def in_effect(at: int) -> InstanceHealth | None:
            return next((h for h in reversed(records) if h.at <= at), None)

        share: dict[str, list[int]] = {}
        for r in routed:
            h = in_effect(r.at)
            if h is None:
                continue
            phase = "open" if h.breaker is BreakerState.OPEN else "probing" if h.breaker is BreakerState.HALF_OPEN \
                else f"admit {h.admit:g}"
            counts = share.setdefault(phase, [0, 0])
            counts[0] += r.instance_id == sick
            counts[1] += 1
        probing, tenth, full = share.get("probing"), share.get("admit 0.1"), share.get("admit 1")
        assert probing is not None and probing[0] >= 1, f"the HALF_OPEN instance got its probes: {share}"
        assert tenth is not None and full is not None, f"no request routed while admit was 0.1 or 1: {share}"
        if tenth[1] >= MIN_SAMPLE:  # a ratio over a handful of requests is noise (a loaded machine sends fewer)
            assert tenth[0] / tenth[1] < 0.2, share
        if min(tenth[1], full[1]) >= MIN_SAMPLE:
            assert full[0] / full[1] > tenth[0] / tenth[1], share
    health.close()
    receipts.close()


def test_end_to_end_a_slow_sole_instance_gets_weight_0_and_serves_with_a_doubled_timeout(
        namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = Names(namespace)
    control.publish(control.policy_record(Policy(slow_threshold_ms=50), scope="demo.echo"), names=names,
                    kafka=KafkaSettings())
    health = TopicReader(names.health)
    receipts = Receipts(names.receipts)
    with stack(tmp_path, monkeypatch, {"REACH_HEALTH_SLOW_WINDOW_MS": "1000", "REACH_HEALTH_SLOW_WINDOWS": "2",
                                       "REACH_HEALTH_SLOW_MIN_CALLS": "3", "REACH_HEALTH_EMIT_INTERVAL_MS": "200"},
               {"examples.sick_agent:agent": {"REACH_SICK_FAIL_RATE": "0", "REACH_SICK_DELAY_MS": "150"}}
               ) as (_app, ready):
        sick = ready[SICK]
        inbox = Tail(names.inbox(SICK), lambda b: codec.decode(b, Envelope))
        with traffic(per_second=10):
            wait_for(lambda: any((h := codec.decode(r.value, InstanceHealth)).weight == 0 and h.timeout_factor == 2.0
                                 for r in health.poll(0.2) if r.key == sick.encode() and r.value), 60,
                     "the health writer setting weight 0 and timeout factor 2 for the slow instance")
            with Client() as client:
                def probe_served_longer() -> Envelope | None:
                    probe = client.envelope("demo.echo", {"probe": True}, execution_timeout_ms=4_000)
                    client.publish(probe)
                    got = inbox.until(lambda es: [e for e in es if e.message_id == probe.message_id] or None, 30,
                                      "the probe in the slow instance's inbox")
                    return got[0] if got[0].execution_timeout_ms == 8_000 else None

                served = wait_for(probe_served_longer, 30, "a request forwarded with the doubled timeout", interval=0.2)
        done = receipts.wait_status([served.message_id], Status.COMPLETED, 30)
        assert any(r.instance_id == sick for r in done[served.message_id] if r.status is Status.COMPLETED)
        inbox.close()
    health.close()
    receipts.close()


def test_an_open_instance_receives_nothing_and_every_request_completes(namespace: str) -> None:
    names = Names(namespace)
    well = Instance(names, "well", partitions=[0])
    sick = Instance(names, "sick", partitions=[1])
    receipts = receipts_tail(names)
    with running_router() as router:
        for inst in (well, sick):
            inst.heartbeat()
        wait_for(lambda: sees(router, well) and sees(router, sick), 30, "both instances in the registry")
        publish_health(names, sick, breaker=BreakerState.OPEN, open_until=now_ms() + 120_000, reason="test")
        wait_for(lambda: "sick" in router.state.health, 30, "the router reading the sick instance's health")
        workers = [Worker(well), Worker(sick)]
        try:
            ids = Sender(names).many(60, capability="text.echo")
            done = receipts.until(lambda rs: len(first_per_message(rs, ids, {Status.COMPLETED})) == len(ids) or None,
                                  60, "every request COMPLETED")
            assert done
            routed = first_per_message(receipts.records, ids, {Status.ROUTED})
            assert {r.instance_id for r in routed.values()} == {"well"}
            assert workers[1].seen == [], "the OPEN instance received no request"
        finally:
            for w in workers:
                w.stop()
    receipts.close()


def test_every_candidate_open_fails_fast_unavailable_with_retry_after(namespace: str) -> None:
    names = Names(namespace)
    only = Instance(names, "only")
    receipts = receipts_tail(names)
    with running_router() as router:
        only.heartbeat()
        wait_for(lambda: sees(router, only), 30, "the instance in the registry")
        open_until = now_ms() + 45_000
        publish_health(names, only, breaker=BreakerState.OPEN, open_until=open_until)
        wait_for(lambda: "only" in router.state.health, 30, "the router reading the health record")
        ids = Sender(names).many(5, capability="text.echo")
        failed = receipts.until(lambda rs: (lambda f: f if len(f) == len(ids) else None)(
            first_per_message(rs, ids, {Status.FAILED})), 30, "FAILED for every request")
    for receipt in failed.values():
        assert receipt.error is not None and (receipt.error.kind, receipt.error.code) == ("UNAVAILABLE", "UNAVAILABLE")
        assert receipt.retry_after_ms is not None and 0 < receipt.retry_after_ms <= open_until - receipt.at + 1
    assert not first_per_message(receipts.records, ids, {Status.ROUTED}), "nothing was forwarded"
    receipts.close()


def test_a_slow_sole_candidate_serves_with_a_doubled_execution_timeout(namespace: str) -> None:
    names = Names(namespace)
    slow = Instance(names, "slow")
    with running_router() as router:
        slow.heartbeat()
        wait_for(lambda: sees(router, slow), 30, "the instance in the registry")
        publish_health(names, slow, weight=0.0, timeout_factor=2.0, slow_ratio=0.9, reason="slow calls")
        wait_for(lambda: "slow" in router.state.health, 30, "the router reading the health record")
        inbox = Tail(slow.inbox, lambda b: codec.decode(b, Envelope))
        sender = Sender(names)
        sent = new_envelope("text.echo", {"n": 1}, execution_timeout_ms=4_000)
        sender.send(sent)
        sender.flush()
        [forwarded] = inbox.until(lambda es: [e for e in es if e.message_id == sent.message_id] or None, 30,
                                  "the envelope in the slow instance's inbox")
    assert forwarded.execution_timeout_ms == 8_000
    assert forwarded.model_copy(update={"execution_timeout_ms": 4_000}) == sent, "nothing else changed"
    inbox.close()


def refill_bound(routed: Iterable[Receipt], *, rate: float = 3.0, burst: int = 3) -> float:
    """The most a limit of `rate`/s (burst `burst`) admits over the span of these ROUTED receipts: tokens refill
    by the router's clock, so a slow router admits more (+1 for a token part-refilled at either end)."""
    ats = [r.at for r in routed]
    return burst + rate * (max(ats) - min(ats)) / 1000 + 1 if ats else burst


def test_over_its_qps_limit_an_instance_is_skipped_and_alone_it_overloads(namespace: str) -> None:
    names = Names(namespace)
    limited, free = Instance(names, "limited", partitions=[0]), Instance(names, "free", partitions=[1])
    receipts = receipts_tail(names)
    with running_router() as router:
        for inst in (limited, free):
            ensure(names, inst.inbox)
            reg = inst.registration().model_copy(update={"qps_limit": 3.0 if inst is limited else None})
            produce(names.registry, reg.instance_id, codec.encode(reg))
        wait_for(lambda: sees(router, limited, qps_limit=3.0) and sees(router, free), 30, "both instances")
        shared = Sender(names).many(30, capability="text.echo")
        routed = receipts.until(lambda rs: (lambda r: r if len(r) == len(shared) else None)(
            first_per_message(rs, shared, {Status.ROUTED})), 30, "every request ROUTED")
        to_limited = sum(1 for r in routed.values() if r.instance_id == "limited")
        assert 1 <= to_limited <= refill_bound(routed.values()), (
            f"{to_limited} of 30 to an instance limited to 3/s (burst 3)")
        free.heartbeat(state=AgentState.DRAINING)
        wait_for(lambda: sees(router, free, state=AgentState.DRAINING), 30, "the free instance draining")
        alone = Sender(names).many(20, capability="text.echo")
        ended = receipts.until(lambda rs: (lambda r: r if len(r) == len(alone) else None)(
            first_per_message(rs, alone, {Status.ROUTED, Status.FAILED})), 30, "every request ROUTED or FAILED")
    failed = [r for r in ended.values() if r.status is Status.FAILED]
    assert failed and all(r.error is not None and r.error.code == "OVERLOAD" and (r.retry_after_ms or 0) > 0
                          for r in failed)
    assert all(r.instance_id == "limited" for r in ended.values() if r.status is Status.ROUTED)
    to_alone = [r for r in ended.values() if r.status is Status.ROUTED]
    assert len(to_alone) <= refill_bound(to_alone), "no more than the burst and what refilled meanwhile"
    receipts.close()


def test_router_workers_count_each_other_for_their_share_of_qps_limit(namespace: str) -> None:
    names = Names(namespace)
    Sender(names).many(1, capability="text.echo")  # a capability topic, so both workers join the hot path's group
    with running_router() as one, running_router() as two:
        wait_for(lambda: one.qps.workers == two.qps.workers == 2, 60, "both workers counting two members")
