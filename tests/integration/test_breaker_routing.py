"""Breaker-aware routing on the real broker: OPEN instances get nothing, all OPEN fails fast, slow sole serves longer.

The router reads InstanceHealth from `<ns>.health`, written here by a producer as the health writer
would: these tests hold the router's side of the contract on its own.
"""

from __future__ import annotations

from reach import codec
from reach.envelopes import new_envelope, now_ms
from reach.names import Names
from reach.records import BreakerState, Envelope, InstanceHealth, Status
from tests.integration.router_helpers import (
    Instance,
    Sender,
    Tail,
    Worker,
    first_per_message,
    produce,
    receipts_tail,
    running_router,
    sees,
    wait_for,
)


def publish_health(names: Names, instance: Instance, **fields: object) -> InstanceHealth:
    record = InstanceHealth(instance_id=instance.instance_id, agent_id=instance.agent_id, at=now_ms(), **fields)  # type: ignore[arg-type]
    produce(names.health, instance.instance_id, codec.encode(record))
    return record


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
