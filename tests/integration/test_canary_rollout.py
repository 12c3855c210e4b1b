"""Canary by version on the real broker: a healthy canary promotes through its steps, a failing one rolls back.

Two instances of one agent run in this process with different build versions; the stream app (router,
delay tiers, status fold and the canary controller) is a `reach router` subprocess; `reach canary
start` is the CLI. Steps are short and the controller judges a step after 3 canary calls.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from reach.agent import Agent, TransientError
from reach.channels.agent import channel_agent
from reach.channels.settings import ChannelSettings, ClosureSettings
from reach.client import Client
from reach.envelopes import now_ms
from reach.kafka import codec
from reach.names import Names
from reach.records import CanaryState, Control, ControlKind, Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from tests.integration.agent_support import ROOT, reach_cli, running, wait_for
from tests.integration.channel_servers import Hit, Receiver, listening
from tests.integration.router_helpers import Tail, first_per_message, receipts_tail
from tests.integration.stream_app import StreamApp

pytestmark = pytest.mark.serial  # a burst of 60 against one stable instance: its queue must not fill for want of CPU

AGENT = "agent://demo/canary"
CAPABILITY = "demo.canary"


@pytest.fixture
def app(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StreamApp]:
    for name, value in {"REACH_CANARY_MIN_CALLS": "3", "REACH_CANARY_TICK_MS": "200",
                        "REACH_CANARY_REPORT_MS": "1000", "REACH_CANARY_CALLBACK_GRACE_MS": "8000"}.items():
        monkeypatch.setenv(name, value)
    stream = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(stream.port))
    stream.start()
    yield stream
    stream.stop()


def versioned(build: str, *, fail: bool) -> Agent:
    agent = Agent(AGENT, build_version=build, max_concurrency=8)

    @agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"}, output_schema={"type": "object"})
    async def handle(payload: dict[str, Any]) -> dict[str, Any]:
        if fail:
            raise TransientError(f"build {build} fails on purpose")
        return {**payload, "build": build}

    return agent


class Traffic:
    """Sends distinct requests at ~`rate`/s on a thread until stopped; `hinted` ones carry RoutingHints.canary."""

    def __init__(self, rate: float = 40.0, *, callback: str | None = None) -> None:
        self.ids: list[str] = []
        self._rate = rate
        self._callback = callback
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with Client() as client:
            n = 0
            while not self._stop.wait(1 / self._rate):
                self.ids.append(client.send(CAPABILITY, {"n": n}, callback=self._callback))
                n += 1


def canary_records(tail: Tail) -> list[Control]:
    return [c for c in tail.poll() if c is not None and c.kind is ControlKind.CANARY]


def start_canary(version: str, *, step: str) -> None:
    done = reach_cli("canary", "start", AGENT, "--version", version, "--steps", "5,50,100", "--step", step,
                     "--min-success", "0.9", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["state"] == "RUNNING"


def ready(app: StreamApp, *instances: Agent) -> None:
    wanted = {a.instance_id for a in instances}

    def settled() -> bool:
        rows = {a["instance_id"]: a for a in app.get("/agents") if a["state"] == "READY"}
        owned = [p for i in wanted if i in rows for p in rows[i]["assigned_partitions"]]
        # the inbox group's rebalance is over: every instance owns partitions, none owned twice
        return wanted <= set(rows) and all(rows[i]["assigned_partitions"] for i in wanted) \
            and len(owned) == len(set(owned))

    wait_for(settled, 60, "both builds READY, each owning inbox partitions")


@contextmanager
def two_builds(app: StreamApp, *, canary_fails: bool, step: str,
               also: tuple[Agent, ...] = ()) -> Iterator[tuple[Agent, Agent, Tail, Tail]]:
    """Instances of 1.0.0 and 1.3.0 READY (and `also`), a 5/50/100 canary of 1.3.0 started; yields them, the
    control topic and the receipts (both read from the beginning)."""
    names = Names(ReachSettings().namespace)
    stable, canary = versioned("1.0.0", fail=False), versioned("1.3.0", fail=canary_fails)
    control = Tail(names.control, lambda b: codec.decode(b, Control))
    receipts = receipts_tail(names)
    try:
        with ExitStack() as stack:
            for agent in (stable, canary, *also):
                stack.enter_context(running(agent))
            ready(app, stable, canary)
            for agent in also:
                wait_for(lambda a=agent: any(r["instance_id"] == a.instance_id and r["state"] == "READY"  # type: ignore[misc]
                                             for r in app.get("/agents")), 60, f"{agent.agent_id} READY")
            start_canary("1.3.0", step=step)
            yield stable, canary, control, receipts
    finally:
        control.close()
        receipts.close()


def test_a_healthy_canary_promotes_through_its_steps(app: StreamApp) -> None:
    with two_builds(app, canary_fails=False, step="2s") as (stable, canary, control, receipts):
        with Traffic() as traffic:
            wait_for(lambda: any(c.canary and c.canary.state is CanaryState.PROMOTED for c in canary_records(control)),
                     90, "the canary PROMOTED")
        ids = list(traffic.ids)
        receipts.until(lambda rs: len(first_per_message(rs, ids, {Status.COMPLETED})) == len(ids) or None, 60,
                       "every request COMPLETED")
        history = [c.canary for c in canary_records(control) if c.canary is not None]
        steps = [(c.step, c.state) for c in history]
        assert (1, CanaryState.RUNNING) in steps and (2, CanaryState.RUNNING) in steps
        assert steps[-1][1] is CanaryState.PROMOTED
        first_promotion = next(c.step_started_at for c in history if c.step == 1)
        routed = [r for r in receipts.records if r.status is Status.ROUTED and r.message_id in set(ids)]
        by_arm = {arm: {r.instance_id for r in routed if r.decision and r.decision.arm == arm}
                  for arm in ("stable", "canary")}
        assert by_arm == {"stable": {stable.instance_id}, "canary": {canary.instance_id}}
        early = [r for r in routed if r.at < first_promotion]
        early_canary = sum(1 for r in early if r.decision and r.decision.arm == "canary")
        assert early and early_canary / len(early) < 0.25, f"{early_canary}/{len(early)} on the canary arm at 5%"
        compared = reach_cli("receipts", "sql", "--file", str(ROOT / "docs/queries/canary.sql"), "--format", "json")
        assert compared.returncode == 0, compared.stderr
        rows = {row["arm"]: row for row in json.loads(compared.stdout)}
        assert set(rows) == {"stable", "canary"} and all(row["success_rate"] == 1.0 for row in rows.values())
        status = json.loads(reach_cli("canary", "status", AGENT, "--json").stdout)
        assert status[0]["state"] == "PROMOTED" and status[0]["share"] == 1.0


def test_a_failing_canary_rolls_back_and_then_gets_nothing(app: StreamApp) -> None:
    with two_builds(app, canary_fails=True, step="60s") as (stable, canary, control, receipts):
        with Traffic() as traffic:
            wait_for(lambda: any(c.canary and c.canary.state is CanaryState.ROLLED_BACK
                                 for c in canary_records(control)), 90, "the canary ROLLED_BACK")
        rolled_back = next(c.canary for c in canary_records(control)
                           if c.canary and c.canary.state is CanaryState.ROLLED_BACK)
        assert rolled_back.step == 0 and "rolled back" in (rolled_back.reason or "")
        with Client() as client:
            def pinned_goes_stable() -> bool:
                probe = client.envelope(CAPABILITY, {"probe": True})
                client.publish(probe.model_copy(update={"routing": probe.routing.model_copy(update={"canary": True})}))
                return bool(receipts.until(lambda rs: first_per_message(rs, [probe.message_id], {Status.ROUTED}), 30,
                                           "the probe ROUTED")[probe.message_id].instance_id == stable.instance_id)

            wait_for(pinned_goes_stable, 30, "the router honouring the rollback", interval=0.2)
            after = now_ms()
            later = []
            for n in range(60):
                env = client.envelope(CAPABILITY, {"after": n})
                if n % 2:
                    env = env.model_copy(update={"routing": env.routing.model_copy(update={"canary": True})})
                client.publish(env)
                later.append(env.message_id)
        ids = [*traffic.ids, *later]
        done = receipts.until(lambda rs: (lambda d: d if len(d) == len(ids) else None)(
            first_per_message(rs, ids, {Status.COMPLETED, Status.FAILED, Status.DEAD_LETTERED})), 90,
            "a terminal receipt for every request")
        unfinished = [(r.error, r.attempt) for r in done.values() if r.status is not Status.COMPLETED]
        assert not unfinished, f"failed canary attempts are retried on stable: {unfinished}"
        failed_on_canary = [r for r in receipts.records if r.instance_id == canary.instance_id
                            and r.status is Status.ATTEMPT_FAILED and r.at < after]
        assert len(failed_on_canary) >= 3, "the canary took its share and failed it before the rollback"
        reached = [r for r in receipts.records if isinstance(r, Receipt) and r.instance_id == canary.instance_id
                   and r.status in (Status.ROUTED, Status.STARTED) and r.at >= after]
        assert reached == [], "no request reaches the rolled-back version"
        assert all(first_per_message(receipts.records, later, {Status.ROUTED})[m].decision.arm is None  # type: ignore[union-attr]
                   for m in later)


class RefusesTheCanary(Receiver):
    """A receiver that cannot take what the canary build answers: 400 (a permanent refusal, so no CALLBACKED)."""

    def answer(self, hit: Hit) -> tuple[int, dict[str, Any]]:
        if b'"1.3.0"' in hit.body:
            return 400, {"error": "unknown build field value"}
        return super().answer(hit)


def test_a_canary_whose_callbacks_are_not_delivered_rolls_back_though_every_call_succeeds(app: StreamApp) -> None:
    webhook = channel_agent("webhook", settings=ChannelSettings(webhook_secret=SecretStr("wh"), timeout_s=2,
                                                                webhook_allow_private=True), kafka=KafkaSettings(),
                            redis=RedisSettings(), reach=ReachSettings(), closure=ClosureSettings())
    with listening(RefusesTheCanary()) as receiver, \
            two_builds(app, canary_fails=False, step="60s", also=(webhook,)) as (stable, canary, control, receipts):
        spec = json.dumps({"channel": "webhook", "endpoint": f"{receiver.url}/hook", "fields": ["$.build"]})
        with Traffic(callback=spec) as traffic:
            wait_for(lambda: any(c.canary and c.canary.state is CanaryState.ROLLED_BACK
                                 for c in canary_records(control)), 120, "the canary ROLLED_BACK")
        rolled_back = next(c.canary for c in canary_records(control)
                           if c.canary and c.canary.state is CanaryState.ROLLED_BACK)
        assert "callbacks 0/" in (rolled_back.reason or ""), rolled_back.reason
        ids = list(traffic.ids)
        completed = receipts.until(lambda rs: (lambda d: d if len(d) == len(ids) else None)(
            first_per_message(rs, ids, {Status.COMPLETED})), 60, "every request COMPLETED")
        on_canary = [r for r in completed.values() if r.instance_id == canary.instance_id]
        assert len(on_canary) >= 3, "the canary's calls succeeded: only its callbacks failed"
        assert receiver.posts(), "the stable arm's callbacks were delivered"
