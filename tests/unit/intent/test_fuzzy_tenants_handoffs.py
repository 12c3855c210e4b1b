"""The fuzzy merge, tenant-aware catalogs, the router's policy handoff and conditional handoff moves (no broker)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reach.core.views.controlview import ControlView
from reach.envelopes import now_ms
from reach.intent import catalog
from reach.intent.claims import MemoryClaims
from reach.intent.desk import HandoffDesk
from reach.intent.errors import HandoffConflict, IntentError
from reach.intent.handoff import Handoff, decode, encode
from reach.intent.semantic import Match
from reach.intent.stages import Thresholds, resolve
from reach.intent.stats import fold
from reach.intent.unroutable import outputs
from reach.kafka import codec
from reach.names import Names
from reach.records import AgentRegistration, AgentState, Capability, Receipt, Status
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.terminals import Fence, MemorySlots, Terminal

TH = Thresholds(upper=0.4, lower=0.25, margin=0.06, exact_floor=0.5, fuzzy_floor=0.2, fuzzy_top=2)
SUPPORT = frozenset({"support.billing", "support.account", "support.general", "weather.forecast"})
GENERICS = {"support": "support.general"}


def ranked(*pairs: tuple[str, float]) -> object:
    return lambda _text: [Match(c, s, f"text of {c}") for c, s in pairs]


def run(rank: object, *, live: frozenset[str] = SUPPORT, th: Thresholds = TH) -> object:
    return resolve("cancel my membership", exact={}, live=live, side_effect_free=frozenset(), rank=rank,  # type: ignore
                   thresholds=th, generics=GENERICS)


def reg(instance: str, *caps: Capability, tenants: list[str] | None = None, **fields: object) -> AgentRegistration:
    base = {"agent_id": "agent://a/b", "instance_id": instance, "build_version": "1", "capabilities": list(caps),
            "state": AgentState.READY, "heartbeat_at": 0, "ttl_ms": 1000, "inbox_topic": "t.agent.a.b",
            "assigned_partitions": [0], "tenants": tenants or []}
    return AgentRegistration(**{**base, **fields})


def test_an_unplaced_request_whose_best_matches_share_a_family_merges_into_its_generic() -> None:
    res = run(ranked(("support.billing", 0.38), ("support.account", 0.34), ("weather.forecast", 0.1)))
    assert res.stage == "fuzzy" and res.capability == "support.general"  # type: ignore[attr-defined]
    assert all("merged into" in (c.reason or "") for c in res.candidates)  # type: ignore[attr-defined]
    assert "family support" in res.note  # type: ignore[attr-defined]
    mixed = run(ranked(("support.billing", 0.38), ("weather.forecast", 0.34)))
    assert mixed.stage == "handoff"  # type: ignore[attr-defined]  # two families: nothing to merge into
    weak = run(ranked(("support.billing", 0.24), ("support.account", 0.15)))
    assert weak.stage == "handoff"  # type: ignore[attr-defined]  # the second is below the fuzzy floor
    unserved = run(ranked(("support.billing", 0.38), ("support.account", 0.34)), live=SUPPORT - {"support.general"})
    assert unserved.stage == "handoff"  # type: ignore[attr-defined]
    off = run(ranked(("support.billing", 0.38), ("support.account", 0.34)), th=TH.model_copy(update={"fuzzy": False}))
    assert off.stage == "handoff"  # type: ignore[attr-defined]
    confident = run(ranked(("support.billing", 0.6), ("support.account", 0.34)))
    assert confident.stage == "semantic"  # type: ignore[attr-defined]  # a confident match is never merged


def test_generics_come_from_the_tag_and_an_ambiguous_family_has_none() -> None:
    general = Capability(name="support.general", version="1.0.0", tags=["support", catalog.GENERIC_TAG])
    other = Capability(name="support.other", version="1.0.0", tags=[catalog.GENERIC_TAG])
    entries = catalog.build([reg("i", general, Capability(name="support.billing", version="1.0.0"))])
    assert catalog.generics(entries) == {"support": "support.general"}
    assert "generic" not in entries["support.general"].texts  # a marker, not words of the capability
    assert catalog.generics(catalog.build([reg("i", general, other)])) == {}


def test_stats_count_the_fuzzy_stage_and_router_handoffs_apart() -> None:
    def resolved(mid: str, stage: str, by: str | None = None) -> Receipt:
        from reach.records import IntentResolution
        return Receipt(message_id=mid, trace_id="t", tenant="x", capability="intent.resolve", at=1,
                       status=Status.INTENT_RESOLVED, resolution=IntentResolution(stage=stage, intent="i", by=by))
    done = Receipt(message_id="a", trace_id="t", tenant="x", capability="support.general", status=Status.COMPLETED,
                   at=2)
    stats = fold([resolved("a", "fuzzy"), done, resolved("b", "semantic"), resolved("c", "handoff", "router")])
    out = stats.as_dict()
    assert out["total"] == 2 and out["stages"]["fuzzy"]["completed"] == 1  # type: ignore[index]
    assert out["policy_handoffs"] == 1


def test_a_capability_resolves_only_where_a_live_instance_serves_the_tenant() -> None:
    weather = Capability(name="weather.forecast", version="1.0.0")
    recipe = Capability(name="recipe.search", version="1.0.0")
    regs = [reg("i-1", weather, tenants=["acme"]), reg("i-2", recipe), reg("i-3", weather, tenants=["umbrella"])]
    tenancy = catalog.tenancy(regs)
    assert tenancy == {"weather.forecast": frozenset({"acme", "umbrella"}), "recipe.search": None}
    every = frozenset(catalog.build(regs))
    assert catalog.served(every, tenancy, "acme") == every
    assert catalog.served(every, tenancy, "globex") == {"recipe.search"}
    res = resolve("weather forecast", exact={}, live=catalog.served(every, tenancy, "globex"),
                  side_effect_free=frozenset(), rank=ranked(("weather.forecast", 0.9), ("recipe.search", 0.1)),
                  thresholds=TH)
    assert res.stage == "handoff"  # weather would score, but nobody serves it for globex


def test_the_resolver_caches_per_served_set_so_tenants_never_share_a_wrong_answer() -> None:
    from reach.streams.resolver.resolve_loop import Resolver
    worker = Resolver(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(), thresholds=Thresholds(),
                      worker_id="r", embedder=lambda: (_ for _ in ()).throw(AssertionError("no model in this test")))
    worker.state.apply_registration("i-1", reg("i-1", Capability(name="weather.forecast", version="1.0.0"),
                                               tenants=["acme"], heartbeat_at=now_ms(), ttl_ms=60_000))
    worker.refresh(now_ms())
    assert worker.resolve("weather forecast", "acme").stage == "exact"
    other = worker.resolve("weather forecast", "globex")
    assert other.stage == "handoff" and other.candidates[0].reason == "no live instance serves it"


ENVELOPE = {"message_id": "m", "trace_id": "t", "tenant": "globex", "capability": "demo.nobody", "payload": b"{}",
            "created_at": 1, "deadline": 99, "capability_version": "^2", "routing": {}, "reply_to": "ns.replies.c1",
            "session_snapshot": "ns.sessions:s1", "source": "agent://caller/x"}


def test_the_router_handoff_bundle_says_why_each_instance_was_left_out() -> None:
    cap = Capability(name="demo.nobody", version="1.0.0")
    regs = [reg("i-tenant", cap, tenants=["acme"]), reg("i-version", cap), reg("i-draining", cap),
            reg("i-starting", cap, state=AgentState.STARTING), reg("i-unassigned", cap, assigned_partitions=[])]
    records = outputs(ENVELOPE, b"raw-bytes", regs, why="no READY instance serves demo.nobody", names=Names("ns"),
                      disabled={"i-draining"}, at=50)
    (h_topic, h_key, h_value, _), (r_topic, r_key, r_value, r_headers) = records
    assert (h_topic, r_topic, h_key, r_key) == ("ns.handoff", "ns.receipts", b"m", b"m")
    bundle = decode(h_value)
    assert bundle.origin == "router" and bundle.capability == "demo.nobody" and bundle.intent == ""
    assert bundle.envelope_bytes() == b"raw-bytes" and bundle.session_snapshot == "ns.sessions:s1"
    assert bundle.trace[0].status == "CREATED" and "asks for a human" in bundle.trace[-1].detail
    why = {c.source: c.reason or "" for c in bundle.candidates}
    assert "not 'globex'" in why["i-tenant"] and "does not satisfy ^2" in why["i-version"]
    assert "drained" in why["i-draining"] and "STARTING" in why["i-starting"]
    assert "no inbox partition" in why["i-unassigned"]
    receipt = codec.decode(r_value, Receipt)
    assert receipt.status is Status.INTENT_RESOLVED and not receipt.status.is_terminal
    assert receipt.resolution is not None and receipt.resolution.stage == "handoff"
    assert receipt.deadline == 99 and (b"x-reach-reply-to", b"ns.replies.c1") in [
        (k.encode() if isinstance(k, str) else k, v) for k, v in r_headers]


def test_the_policy_flag_defaults_off_and_scopes_like_every_field() -> None:
    from reach import control
    from reach.records import Policy
    view = ControlView()
    assert view.policy("demo.nobody").handoff is False
    on = control.policy_record(Policy(handoff=True), scope="demo.nobody")
    view.apply(on.key, codec.decode(codec.encode(on), type(on)))
    assert view.policy("demo.nobody").handoff and not view.policy("demo.other").handoff


def test_the_router_module_loads_no_model_or_numpy() -> None:
    probe = ("import sys, reach.streams.router.route_loop; "
             "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('reach.intent.model', "
             "'reach.intent.semantic', 'tokenizers', 'safetensors'))))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


class MemoryDesk(HandoffDesk):
    """The desk with the compacted topic as a dict: `stale` keeps answering with what it first read."""

    def __init__(self, store: dict[str, bytes], claims: MemoryClaims, *, stale: bool = False,
                 slots: MemorySlots | None = None) -> None:
        super().__init__(names=Names("ns"), kafka=KafkaSettings(), redis=RedisSettings(), claims=lambda: claims,
                         fence=Fence(slots or MemorySlots(), writer="desk"))
        self.store, self.stale, self.sent = store, stale, []
        self.values: list[bytes] = []
        self._first: dict[str, Handoff] | None = None

    def all(self) -> dict[str, Handoff]:
        now = {k: decode(v) for k, v in self.store.items()}
        if self.stale:
            self._first = self._first or now
            return self._first
        return now

    def _send(self, records: list[tuple[str, str, bytes, list[tuple[str, bytes]]]]) -> None:
        for topic, key, value, _ in records:
            self.sent.append(topic)
            self.values.append(value)
            if topic == "ns.handoff":
                self.store[key] = value


def test_of_two_operators_moving_one_handoff_at_once_exactly_one_writes() -> None:
    raw = codec.encode_dict("Envelope", {"message_id": "m", "trace_id": "t", "tenant": "globex", "payload": b"{}",
                                         "capability": "demo.nobody", "created_at": 1, "source": "agent://caller/x",
                                         "deadline": now_ms() + 60_000, "delivery_timeout_ms": 1,
                                         "execution_timeout_ms": 1})
    record = outputs(ENVELOPE | {"deadline": None}, raw, [], why="nobody", names=Names("ns"), disabled=(), at=1)[0]
    store = {"m": record[2]}
    claims = MemoryClaims()
    slow = MemoryDesk(store, claims, stale=True)
    slow.get("m")  # reads version 0 before the other operator moves it
    fast = MemoryDesk(store, claims)
    assert fast.take("m", by="ann").version == 1
    with pytest.raises(HandoffConflict) as lost:
        slow.answer("m", json.dumps({"a": 1}), by="bob")
    assert "another operator" in str(lost.value) and slow.sent == []  # the loser wrote nothing
    done = fast.answer("m", json.dumps({"a": 1}), by="ann")
    assert done.state == "ANSWERED" and done.version == 2 and fast.sent == ["ns.handoff", "ns.receipts", "ns.handoff"]
    assert decode(store["m"]).resolved_by == "ann"
    assert encode(done) == store["m"]


def handoff_store() -> dict[str, bytes]:
    raw = codec.encode_dict("Envelope", {"message_id": "m", "trace_id": "t", "tenant": "globex", "payload": b"{}",
                                         "capability": "demo.nobody", "created_at": 1, "source": "agent://caller/x",
                                         "deadline": now_ms() + 60_000, "delivery_timeout_ms": 1,
                                         "execution_timeout_ms": 1})
    return {"m": outputs(ENVELOPE | {"deadline": None}, raw, [], why="nobody", names=Names("ns"), disabled=(),
                         at=1)[0][2]}


def test_an_answer_to_a_message_that_already_ended_is_refused_and_a_won_answer_is_sent_again() -> None:
    slots = MemorySlots()
    expired = codec.encode(Receipt(message_id="m", trace_id="t", tenant="globex", capability="demo.nobody",
                                   status=Status.EXPIRED, at=2))
    slots.values[("m", 0)] = expired  # the timekeeper ended it first
    late = MemoryDesk(handoff_store(), MemoryClaims(), slots=slots)
    with pytest.raises(IntentError, match="already ended EXPIRED"):
        late.answer("m", "too late", by="ann")
    assert late.sent == [] and slots.values[("m", 0)] == expired

    slots = MemorySlots()
    first = MemoryDesk(handoff_store(), MemoryClaims(), slots=slots)
    first._send = lambda _records: (_ for _ in ()).throw(OSError("broker gone"))  # type: ignore[method-assign]
    with pytest.raises(OSError):
        first.answer("m", "42", by="ann")  # the claim won, the publish failed
    again = MemoryDesk(handoff_store(), MemoryClaims(), slots=slots)
    again.answer("m", "42", by="ann")  # run again: the answer that won is published, not refused
    assert again.sent == ["ns.receipts", "ns.handoff"] and again.values[0] == slots.values[("m", 0)]
    assert Fence(slots, writer="x").claim([Terminal("m", 0, b"other")])[0].won is False


def test_a_restored_pair_completes_from_its_stored_state_and_never_twice() -> None:
    from reach.intent.dual import DualTracker, PairRecord

    def child(mid: str, status: Status) -> Receipt:
        return Receipt(message_id=mid, trace_id="t", tenant="x", capability="c", status=status, at=1)
    parent = {"message_id": "p", "deadline": 99, "trace_id": "t", "payload": b"x" * 900_000, "reply_to": "ns.r"}
    stored = DualTracker.new_record(parent, {"a": "x.a", "b": "x.b"}, owner="r1")
    assert len(stored.model_dump_json()) < 1_000  # the fields the receipts need, never the payload
    first = DualTracker()
    first.restore(stored)
    waiting = first.answered(child("a", Status.FAILED))
    assert waiting is not None and waiting.action == "wait" and waiting.state is not None
    # the worker restarts: only the stored record remains
    again = DualTracker()
    again.restore(PairRecord.model_validate_json(waiting.state.model_dump_json()))
    assert again.answered(child("a", Status.FAILED)) is None  # already ended before the restart
    won = again.answered(child("b", Status.COMPLETED))
    assert won is not None and won.action == "complete" and won.state is None  # both ended: tombstone
    assert won.parent["reply_to"] == "ns.r" and won.parent["trace_id"] == "t"
    assert again.answered(child("b", Status.COMPLETED)) is None and len(again) == 0
    assert stored.owner == "r1" and stored.deadline == 99


def test_resolving_a_request_again_yields_the_same_pair_and_keeps_its_state() -> None:
    from reach.intent import dispatch
    from reach.intent.dual import DualTracker
    from reach.intent.stages import Resolution
    envelope = {"message_id": "p", "generation": 1, "trace_id": "t", "tenant": "x", "capability": "intent.resolve",
                "intent": "rain?", "payload": b"{}", "routing": {}, "deadline": 9}
    dual = Resolution("dual", "rain?", "a.b", dual=("a.b", "c.d"))

    def children() -> dict[str, str]:
        return {o.key: o.capability or "" for o in dispatch.plan(envelope, b"raw", dual, at=1, reply_topic="ns.r")
                if o.kind == "child"}
    first = children()
    assert first == children() == {"p.g1.dual0": "a.b", "p.g1.dual1": "c.d"}
    tracker = DualTracker()
    tracker.restore(DualTracker.new_record(envelope, first, owner="r"))
    ended = tracker.answered(Receipt(message_id="p.g1.dual0", trace_id="t", tenant="x", capability="a.b",
                                     status=Status.FAILED, at=2))
    assert ended is not None and ended.action == "wait"
    tracker.restore(DualTracker.new_record(envelope, children(), owner="r"))  # read again: the pair keeps its state
    last = tracker.answered(Receipt(message_id="p.g1.dual1", trace_id="t", tenant="x", capability="c.d",
                                    status=Status.FAILED, at=3))
    assert last is not None and last.action == "fail"


def test_a_router_handoff_waits_for_a_human_within_its_budget_then_the_timekeeper_expires_it() -> None:
    from reach.core import lifecycle as status
    from reach.core.deadlines import Due, due_tasks
    accepted = Receipt(message_id="m", trace_id="t", tenant="globex", capability="demo.nobody", at=10, deadline=99,
                       status=Status.ACCEPTED)
    handed = codec.decode(outputs(ENVELOPE, b"raw", [], why="nobody", names=Names("ns"), disabled=(), at=50)[1][2],
                          Receipt)
    row = status.fold(status.fold(None, accepted), handed)
    assert row.status is Status.INTENT_RESOLVED and not row.terminal and row.deadline == 99  # waiting for a human
    assert due_tasks([row], now_ms=98) == []
    assert [t.due for t in due_tasks([row], now_ms=99)] == [Due.EXPIRE]


def test_a_family_tag_groups_capabilities_across_prefixes_for_the_fuzzy_merge() -> None:
    def cap(name: str, *tags: str) -> Capability:
        return Capability(name=name, version="1.0.0", tags=list(tags))
    entries = catalog.build([
        reg("i", cap("billing.refund", "family:customer"), cap("accounts.close", "family:customer"),
            cap("helpdesk.general", "family:customer", catalog.GENERIC_TAG), cap("weather.forecast")),
        reg("j", cap("accounts.close", "family:zeta"))])  # an instance that disagrees: the first name wins
    assert catalog.generics(entries) == {"customer": "helpdesk.general"}
    families = catalog.families(entries)
    assert families["billing.refund"] == families["accounts.close"] == "customer"
    assert families["weather.forecast"] == "weather"  # untagged: its name's first segment
    assert not any("family:" in t for e in entries.values() for t in e.texts)  # a marker, not words
    live = frozenset(entries)
    res = resolve("give my money back and close it", exact={}, live=live, side_effect_free=frozenset(),
                  rank=ranked(("billing.refund", 0.38), ("accounts.close", 0.34)),  # type: ignore[arg-type]
                  thresholds=TH, generics=catalog.generics(entries), families=families)
    assert res.stage == "fuzzy" and res.capability == "helpdesk.general" and "family customer" in res.note
    by_prefix = resolve("give my money back and close it", exact={}, live=live, side_effect_free=frozenset(),
                        rank=ranked(("billing.refund", 0.38), ("accounts.close", 0.34)),  # type: ignore[arg-type]
                        thresholds=TH, generics=catalog.generics(entries))
    assert by_prefix.stage == "handoff"  # without the tags the two are of different families
