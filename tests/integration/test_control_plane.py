"""The control plane on the real broker, Redis and router: `reach agents drain <id>` moves a running `reach agent
run` process to DRAINING, it finishes its in-flight work, deregisters and exits 0; `disable` / `enable` take
effect on the router and the instance without a restart; `reach policy set` reaches clients at send time."""

from __future__ import annotations

from typing import Any

from reach import control
from reach.agent import Agent
from reach.client import Client
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import AgentRegistration, AgentState, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, TopicReader, reach_cli, running, spawn, wait_for
from tests.integration.stream_app import StreamApp


def _states(reader: TopicReader, instance_id: str) -> list[AgentState | None]:
    return [None if rec.value is None else codec.decode(rec.value, AgentRegistration).state
            for rec in reader.poll() if rec.key == instance_id.encode()]


def _live(names: Names, agent_id: str) -> list[str]:
    return [r.instance_id for r in read_registry(KafkaSettings(), names).live(now_ms())
            if r.agent_id == agent_id and r.state is AgentState.READY]


def test_drain_finishes_in_flight_work_deregisters_and_exits_0(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    receipts, registry = Receipts(names.receipts), TopicReader(names.registry)
    proc = spawn("examples.billing_agent:agent", REACH_BILLING_DELAY_MS="3000")
    try:
        [instance] = wait_for(lambda: _live(names, "agent://demo/billing"), 60, "the billing agent READY")
        with Client() as client:
            ids = [client.send("demo.charge", {"order": f"d-{i}", "amount": 1.0}) for i in range(3)]
        receipts.wait_status(ids, Status.STARTED, timeout=60)
        out = reach_cli("agents", "drain", instance)
        assert out.returncode == 0, out.stderr
        wait_for(lambda: AgentState.DRAINING in _states(registry, instance), 10, "DRAINING within a few seconds")
        assert proc.wait(timeout=60) == 0, (proc.stderr.read() if proc.stderr else b"").decode()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    seen = receipts.wait_status(ids, Status.COMPLETED, timeout=30)
    assert all(r.instance_id == instance for m in ids for r in seen[m] if r.status is Status.COMPLETED)
    states = wait_for(lambda: (lambda s: s if s and s[-1] is None else None)(_states(registry, instance)), 10,
                      "the registry tombstone")
    assert AgentState.DRAINING in states and states[-1] is None
    assert not [i for i in read_registry(KafkaSettings(), names).instances(now_ms())
                if i.registration.instance_id == instance]
    leftover = control.read_control(names=names, kafka=KafkaSettings()).records()
    assert f"INSTANCE:{instance}" not in leftover, "the DRAIN record is removed once obeyed"


def _echo(instance_id: str) -> Agent:
    agent = Agent("agent://test/ctl", instance_id=instance_id, max_concurrency=4, drain_grace_s=10)

    @agent.capability("test.ctl", version="1.0.0")
    async def echo(payload: Any) -> Any:
        return payload

    return agent


def _served_by(receipts: Receipts, ids: list[str], timeout: float = 60) -> set[str | None]:
    """Who completed the messages; empty when not all completed within `timeout` (a message routed to the
    disabled instance just before the router saw DISABLE waits in its paused inbox for the delivery-timeout
    reroute, which can take longer than a poll here)."""
    try:
        seen = receipts.wait_status(ids, Status.COMPLETED, timeout=timeout)
    except AssertionError:
        return set()
    return {r.instance_id for m in ids for r in seen[m] if r.status is Status.COMPLETED}


def test_disable_and_enable_take_effect_without_restart(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    receipts = Receipts(names.receipts)
    a, b = _echo("ctl-a"), _echo("ctl-b")
    with running(a), running(b), Client() as client:
        wait_for(lambda: set(_live(names, a.agent_id)) == {"ctl-a", "ctl-b"}, 60, "both instances READY")
        assert reach_cli("agents", "disable", "ctl-a").returncode == 0

        def only_b() -> bool:
            ids = [client.send("test.ctl", {"i": i}) for i in range(6)]
            return _served_by(receipts, ids, timeout=20) == {"ctl-b"}

        # the router follows control within a poll or two; after that nothing reaches the disabled instance
        wait_for(only_b, 90, "the router skipping the disabled instance", interval=0.5)
        ids = [client.send("test.ctl", {"i": i}) for i in range(20)]
        assert _served_by(receipts, ids) == {"ctl-b"}
        assert reach_cli("agents", "enable", "ctl-a").returncode == 0

        def a_again() -> bool:
            ids = [client.send("test.ctl", {"i": i}) for i in range(10)]
            return "ctl-a" in _served_by(receipts, ids, timeout=20)

        wait_for(a_again, 120, "the enabled instance serving again", interval=0.5)
        assert set(_live(names, a.agent_id)) == {"ctl-a", "ctl-b"}, "neither instance restarted or left"


def test_policy_set_reaches_a_running_client_at_send_time(namespace: str) -> None:
    with Client() as client:
        before = client.envelope("test.ctl", {})
        assert reach_cli("policy", "set", "--capability", "test.ctl", "--budget", "2m",
                         "--execution-timeout", "3s").returncode == 0

        def sent_with_policy() -> Any:
            env = client.envelope("test.ctl", {})
            return env if env.execution_timeout_ms == 3_000 else None

        env = wait_for(sent_with_policy, 10, "the client's control feed to see the new POLICY")
    assert before.execution_timeout_ms != 3_000
    assert env.deadline - env.created_at == 120_000
    shown = reach_cli("policy", "show", "--capability", "test.ctl", "--json")
    assert shown.returncode == 0, shown.stderr
    assert '"from": "test.ctl"' in shown.stdout
