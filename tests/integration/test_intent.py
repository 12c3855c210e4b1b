"""Intent routing end to end: exact, semantic (the real model from its package), handoff, dual dispatch, stats."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from reach import control
from reach.agent import Agent, BusinessError, Context
from reach.client import Client
from reach.envelopes import now_ms
from reach.intent import mappings
from reach.intent.catalog import GENERIC_TAG, RESERVED, SIDE_EFFECT_FREE_TAG
from reach.intent.claims import RedisClaims, claim_key
from reach.intent.desk import HandoffDesk
from reach.intent.errors import ResolverIdInUse
from reach.intent.model import shared_model
from reach.intent.sample import CATALOG, SUPPORT_FAMILY, UNRELATED
from reach.intent.stages import Thresholds
from reach.names import Names
from reach.records import Policy, Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.resolver.resolve_loop import Resolver, ResolverSettings
from tests.integration.agent_support import Receipts, TopicReader, reach_cli, running
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def offline_model() -> None:
    """The model loads from its installed package with the hub switched off (loaded once for the module)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    shared_model()


def catalog_agent(slow: frozenset[str] = frozenset(), support: bool = False,
                  gate: threading.Event | None = None) -> Agent:
    """The sample catalog (and the support family); `slow` capabilities answer after 2 s, or once `gate` is set."""
    async def hold() -> None:
        if gate is None:
            await asyncio.sleep(2.0)
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.05)

    agent = Agent("agent://demo/intents", max_concurrency=16)
    for cap in (*CATALOG, *(SUPPORT_FAMILY if support else ())):
        tags = [*cap.tags, *([SIDE_EFFECT_FREE_TAG] if cap.side_effect_free else []),
                *([GENERIC_TAG] if cap.generic else [])]

        def handler(name: str) -> Any:
            async def handle(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
                if name in slow:
                    await hold()
                if payload.get("fail"):
                    raise BusinessError("ASKED_TO_FAIL")
                return {"served_by": name, "snapshot": ctx.session_snapshot, **payload}
            return handle

        agent.capability(cap.name, version="1.0.0", tags=tags, examples=list(cap.examples),
                         input_schema={"type": "object", "description": cap.description})(handler(cap.name))
    return agent


@contextmanager
def stack(tmp_path: Path, **resolver: Any) -> Iterator[tuple[Resolver, Client, Receipts]]:
    agent = catalog_agent(**resolver.pop("agent", {}))
    with running_status(tmp_path), running_router(), running(agent), \
            Resolver(**{"worker_id": ResolverSettings().id, **resolver}, kafka=KafkaSettings(), reach=ReachSettings(),
                     redis=RedisSettings(), thresholds=Thresholds()) as worker, Client() as client:
        wanted = set(agent.capabilities)
        wait_for(lambda: (worker.refresh(0) or True) and wanted <= worker.capabilities, what="catalog READY")
        receipts = Receipts(Names(os.environ["REACH_NAMESPACE"]).receipts)
        try:
            yield worker, client, receipts
        finally:
            receipts.close()


def resolved(receipts: list[Receipt]) -> Receipt | None:
    return next((r for r in receipts if r.status is Status.INTENT_RESOLVED and r.resolution
                 and r.resolution.stage != "discarded"), None)


def terminal(receipts: list[Receipt]) -> Receipt | None:
    return next((r for r in receipts if r.status.is_terminal), None)


def test_exact_semantic_handoff_and_stats(namespace: str, tmp_path: Path) -> None:
    with stack(tmp_path) as (_worker, client, receipts):
        sent = reach_cli("send", "--intent", "Weather forecast for Berlin", "--payload", '{"city": "Berlin"}',
                         "--session-snapshot", f"{namespace}.sessions:s-exact", "--wait", "--json")
        assert sent.returncode == 0, sent.stdout + sent.stderr  # COMPLETED through the resolver and the router
        exact = json.loads(sent.stdout)["message_id"]
        expected = {client.send(RESERVED, {"n": i}, intent=p): c.name
                    for c in CATALOG for i, p in enumerate(c.paraphrases)}
        unrelated = [client.send(RESERVED, {}, intent=text, session_snapshot=f"{namespace}.sessions:s-{i}")
                     for i, text in enumerate(UNRELATED)]
        every = [exact, *expected, *unrelated]
        seen = wait_for(lambda: (lambda s: s if all(resolved(s.get(m, [])) for m in every) else None)(
            receipts.by_message()), timeout=40, what="every intent resolved")

        first = resolved(seen[exact])
        assert first is not None and first.resolution is not None
        assert first.resolution.stage == "exact" and first.resolution.capability == "weather.forecast"
        served = wait_for(lambda: terminal(receipts.by_message().get(exact, [])), what="exact one completed")
        assert json.loads(served.result or b"")["snapshot"] == f"{namespace}.sessions:s-exact"  # agent's context

        right = 0
        for message_id, capability in expected.items():
            res = resolved(seen[message_id])
            assert res is not None and res.resolution is not None
            right += res.resolution.stage in ("semantic", "dual") and res.resolution.capability == capability
        print(f"held-out paraphrases routed to the right capability: {right}/{len(expected)}")
        assert right / len(expected) >= 0.8

        handed = [m for m in unrelated if (r := resolved(seen[m])) and r.resolution and
                  r.resolution.stage == "handoff"]
        print(f"unrelated sentences handed off: {len(handed)}/{len(unrelated)}")
        assert len(handed) / len(unrelated) >= 0.9

        desk = HandoffDesk(names=Names(namespace), kafka=KafkaSettings(), redis=RedisSettings())
        queue = wait_for(lambda: (lambda q: q if set(handed) <= q.keys() else None)(desk.all()),
                         what="handoff records")
        for message_id in handed:
            bundle = queue[message_id]
            assert bundle.state == "OPEN" and bundle.candidates and all(c.reason for c in bundle.candidates)
            assert bundle.session_snapshot and bundle.trace[-1].status == "INTENT_RESOLVED"

        # a human answers one and re-routes another (which also teaches the exact map)
        answered, rerouted = handed[0], handed[1]
        desk.take(answered, by="ops")  # the API the CLI runs; the CLI itself answers (one process start, ~2 s)
        done = reach_cli("handoff", "resolve", answered, "--answer", '{"answer": "42"}', "--by", "ops")
        assert done.returncode == 0, done.stderr
        desk.reroute(rerouted, "recipe.search", by="ops")
        ends = wait_for(lambda: (lambda s: s if terminal(s.get(answered, [])) and terminal(s.get(rerouted, []))
                                 else None)(receipts.by_message()), what="handoffs completed")
        human = terminal(ends[answered])
        assert human is not None and human.status is Status.COMPLETED and human.resolution is not None
        assert human.resolution.stage == "human" and human.resolution.by == "ops"
        assert json.loads(human.result or b"") == {"answer": "42"}
        moved = terminal(ends[rerouted])
        assert moved is not None and moved.status is Status.COMPLETED
        assert json.loads(moved.result or b"")["served_by"] == "recipe.search"
        again = client.send(RESERVED, {}, intent=UNRELATED[UNRELATED.index(desk.get(rerouted).intent)])
        taught = wait_for(lambda: resolved(receipts.by_message().get(again, [])), what="taught mapping used")
        assert taught.resolution is not None and taught.resolution.stage == "exact"
        assert taught.resolution.capability == "recipe.search"

        # the shares `reach intents stats` reports are the mix this run produced
        final = receipts.by_message()
        mix: dict[str, int] = {}
        for message_id in [*every, again]:
            res = resolved(final[message_id])
            assert res is not None and res.resolution is not None
            mix[res.resolution.stage] = mix.get(res.resolution.stage, 0) + 1
        shown = reach_cli("intents", "stats", "--json")
        assert shown.returncode == 0, shown.stderr
        stats = json.loads(shown.stdout)
        assert stats["total"] == len(every) + 1
        for stage, count in mix.items():
            assert stats["stages"][stage]["resolved"] == count
            assert stats["stages"][stage]["share"] == round(count / (len(every) + 1), 4)


def test_dual_dispatch_first_valid_answer_wins(namespace: str, tmp_path: Path) -> None:
    # translate and weather both match this about as well (0.33 / 0.30 with the shipped thresholds: below
    # `upper`, closer than `margin`) and both are free of side effects, so both run; translate is slow, its
    # answer arrives second and is recorded as discarded
    with stack(tmp_path, agent={"slow": frozenset({"text.translate"})}) as (worker, client, receipts):
        message_id = client.send(RESERVED, {"q": 1}, intent="how do you say rain in Italian")
        # a second resolver under the same id would split the replies with this one: once this one has joined its
        # reply group, a second is refused at start, naming who holds the id
        wait_for(lambda: worker.describe_reply_group().result(10).members, what="the resolver in its reply group")
        second = Resolver(worker_id=worker.worker_id, kafka=KafkaSettings(), reach=ReachSettings(),
                          redis=RedisSettings(), thresholds=Thresholds())
        try:
            with pytest.raises(ResolverIdInUse, match=worker.client_id):
                second.start()
        finally:
            second.stop()
        no_intent = client.envelope("demo.echo", {}).model_copy(update={"capability": RESERVED})
        client.publish(no_intent)  # to <ns>.intents: an intent envelope without its intent
        names = Names(namespace)
        garbage = Producer(KafkaSettings().producer())
        garbage.produce(names.intents, b"not an envelope", key=b"junk")
        assert garbage.flush(10) == 0
        seen = wait_for(lambda: (lambda s: s if any(r.resolution and r.resolution.stage == "discarded"
                                                    for r in s.get(message_id, [])) else None)(receipts.by_message()),
                        timeout=30, what="both branches ended")
        mine = seen[message_id]
        first = resolved(mine)
        assert first is not None and first.resolution is not None and first.resolution.stage == "dual"
        ends = [r for r in mine if r.status.is_terminal]
        assert len(ends) == 1 and ends[0].status is Status.COMPLETED and ends[0].resolution is not None
        winner = ends[0].resolution.child_id
        assert json.loads(ends[0].result or b"")["served_by"] != "text.translate"
        discarded = next(r for r in mine if r.resolution and r.resolution.stage == "discarded")
        assert discarded.resolution is not None and discarded.resolution.child_id not in (None, winner)
        children = {m: rs for m, rs in seen.items() if m in (winner, discarded.resolution.child_id)}
        assert all(any(r.status is Status.COMPLETED for r in rs) for rs in children.values())
        refused = receipts.wait_status([no_intent.message_id], Status.REJECTED)[no_intent.message_id]
        assert refused[-1].error is not None and refused[-1].error.code == "BAD_INTENT"
        letters = TopicReader(names.dlq)
        try:
            wait_for(lambda: any(r.headers.get("x-reach-reason") == b"UNDECODABLE" for r in letters.poll()),
                     what="the undecodable record dead-lettered")
        finally:
            letters.close()

        # feedback (issue 28, finding 5): requests bound to expire (budget_ms 1) count against no mapping; an exact
        # mapping whose requests keep failing loses confidence for the failing tenant alone, in a record of its own
        phrase = "find a recipe for lasagna"
        control.publish(mappings.record(phrase, "recipe.search", by="ops"), names=names, kafka=KafkaSettings())
        wait_for(lambda: (worker.refresh(now_ms()) or True) and "INTENT:" + phrase in worker.state.control.records(),
                 what="the operator's mapping followed")
        expiring = [client.send(RESERVED, {}, intent=phrase, tenant="mallory", budget_ms=1) for _ in range(6)]
        receipts.wait_status(expiring, Status.EXPIRED)
        failing = [client.send(RESERVED, {"fail": True}, intent=phrase, tenant="acme") for _ in range(3)]
        receipts.wait_status(failing, Status.FAILED)
        learned_key = "INTENT_FEEDBACK:acme:" + phrase
        records = wait_for(lambda: (lambda r: r if learned_key in r else None)(control.read_control(
            names=names, timeout=3, kafka=KafkaSettings()).records()), what="acme's lowered confidence")
        lowered = records[learned_key].intent
        assert lowered is not None and (lowered.source, lowered.tenant) == ("feedback", "acme")
        assert lowered.confidence == 0.75 and lowered.capability == "recipe.search"
        operator = records["INTENT:" + phrase].intent  # the operator's mapping: untouched, for every tenant
        assert operator is not None and (operator.source, operator.confidence) == ("operator", 1.0)
        assert not any(k.startswith("INTENT_FEEDBACK:mallory:") for k in records)  # EXPIRED counted for nothing
        listed = json.loads(reach_cli("intents", "ls", "--no-seeds", "--json").stdout)
        assert {"phrase": phrase, "capability": "recipe.search", "confidence": 0.75, "source": "feedback",
                "tenant": "acme"} in listed


def test_policy_handoff_fuzzy_merge_and_a_restarted_resolver_completes_its_dual(
        namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    names = Names(namespace)
    nobody = "demo.nobody"  # no instance serves it; its policy asks for a human (published before the router starts)
    with Client() as setup:
        setup.ensure_topic(names.capability(nobody))
    control.publish(control.policy_record(Policy(handoff=True), scope=nobody), names=names, kafka=KafkaSettings())
    gate = threading.Event()  # both dual branches answer only once the first resolver has stopped
    agent = {"slow": frozenset({"text.translate", "weather.forecast"}), "support": True, "gate": gate}
    with stack(tmp_path, agent=agent, worker_id="r-restart") as (worker, client, receipts):
        # 1. UNROUTABLE with handoff in its policy: a handoff with the bundle, not a terminal; a human answers
        unserved = client.send(nobody, {"q": "who serves this"}, session_snapshot=f"{namespace}.sessions:s-9")
        first = resolved(receipts.wait_status([unserved], Status.INTENT_RESOLVED)[unserved])
        assert first is not None and first.resolution is not None and first.resolution.stage == "handoff"
        assert first.resolution.by == "router" and first.resolution.candidates == []  # nobody registers it
        desk = HandoffDesk(names=names, kafka=KafkaSettings(), redis=RedisSettings())
        bundle = wait_for(lambda: desk.all().get(unserved), what="the router's handoff record")
        assert bundle.origin == "router" and bundle.capability == nobody and bundle.state == "OPEN"
        assert bundle.session_snapshot == f"{namespace}.sessions:s-9" and "asks for a human" in bundle.trace[-1].detail
        desk.take(unserved, by="ops")
        desk.answer(unserved, '{"answer": "by hand"}', by="ops")
        human = receipts.wait_status([unserved], Status.COMPLETED)[unserved]
        assert not any(r.status is Status.UNROUTABLE for r in human)
        answer = terminal(human)
        assert answer is not None and answer.resolution is not None and answer.resolution.stage == "human"
        # the conditional move the desk made: version 0 -> 1 is taken, by ops
        claims = RedisClaims(RedisSettings().url())
        assert not claims.claim(claim_key(namespace, unserved, bundle.at, 0), "late", 5)

        # 2. fuzzy merge: support.billing / support.account both match, neither with confidence -> support.general
        merged = client.send(RESERVED, {"n": 1}, intent=SUPPORT_FAMILY[-1].paraphrases[0])
        done = receipts.wait_status([merged], Status.COMPLETED)[merged]
        res = resolved(done)
        assert res is not None and res.resolution is not None and res.resolution.stage == "fuzzy"
        assert res.resolution.capability == "support.general"
        assert json.loads(terminal(done).result or b"")["served_by"] == "support.general"  # type: ignore[union-attr]

        # 3. a dual dispatch whose resolver stops before either branch answers: its restart completes it
        dual = client.send(RESERVED, {"q": 1}, intent="how do you say rain in Italian")
        split = receipts.wait_status([dual], Status.INTENT_RESOLVED)[dual]
        assert resolved(split).resolution.stage == "dual"  # type: ignore[union-attr]
        worker.stop()
        gate.set()  # the answers reach the reply topic while no resolver runs (or just as the next one starts)
        caplog.set_level(logging.INFO, logger="reach.resolver")
        with Resolver(worker_id="r-restart", kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(),
                      thresholds=Thresholds()) as again:
            assert again.reply_topic == worker.reply_topic
            ends = wait_for(lambda: (lambda s: s if any(r.resolution and r.resolution.stage == "discarded"
                                                        for r in s.get(dual, [])) else None)(receipts.by_message()),
                            timeout=30, what="both branches ended after the restart")[dual]
            finals = [r for r in ends if r.status.is_terminal]
            assert len(finals) == 1 and finals[0].status is Status.COMPLETED  # not EXPIRED, and only one
            assert finals[0].resolution is not None and finals[0].resolution.stage == "dual"
            assert "1 pending pair(s) restored" in caplog.text  # from <ns>.dual-pairs, not from memory

        shown = reach_cli("intents", "stats", "--json")
        assert shown.returncode == 0, shown.stderr
        stats = json.loads(shown.stdout)
        assert stats["stages"]["fuzzy"]["resolved"] == 1 and stats["stages"]["fuzzy"]["completed"] == 1
        assert stats["policy_handoffs"] == 1 and stats["stages"]["dual"]["completed"] == 1
