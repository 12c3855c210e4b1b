"""Catalog from registrations, exact-map seeds and INTENT records, dual bookkeeping, stats, handoff moves."""

from __future__ import annotations

import json

import pytest

from reach.intent import catalog, dispatch, mappings
from reach.intent.dual import DualTracker
from reach.intent.errors import IntentError
from reach.intent.stages import Resolution
from reach.intent.stats import fold
from reach.records import AgentRegistration, Capability, IntentResolution, Receipt, Status


def registration(*caps: Capability) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id="i", build_version="1", capabilities=list(caps),
                             state="READY", heartbeat_at=0, ttl_ms=1000, inbox_topic="t.agent.a.b")


WEATHER = Capability(name="weather.forecast", version="1.0.0", tags=["weather", catalog.SIDE_EFFECT_FREE_TAG],
                     input_schema=json.dumps({"description": "Forecast for a city"}),
                     examples=["weather forecast for Berlin", json.dumps({"city": "Paris", "n": 3}), "42"])


def test_catalog_reads_description_examples_tags_and_side_effect_freedom() -> None:
    entries = catalog.build([registration(WEATHER, Capability(name="intent.resolve", version="1.0.0"),
                                          Capability(name="channel.webhook", version="1.0.0"))])
    assert list(entries) == ["weather.forecast"]  # intent.resolve and the channels are never targets
    entry = entries["weather.forecast"]
    assert entry.texts == ["Forecast for a city", "weather forecast for Berlin", "Paris", "weather forecast",
                           "weather"]
    assert entry.side_effect_free


def test_seeds_skip_phrases_two_capabilities_share() -> None:
    other = Capability(name="weather.alerts", version="1.0.0", tags=["weather"])
    seeds = catalog.seeds(catalog.build([registration(WEATHER, other)]))
    assert seeds["weather forecast for berlin"] == "weather.forecast"
    assert "weather" not in seeds and seeds["weather.alerts"] == "weather.alerts"


def test_operator_records_win_over_seeds_and_bad_ones_are_refused() -> None:
    rec = mappings.record("  Rain?? ", "weather.forecast", confidence=0.7)
    assert rec.key == "INTENT:rain" and rec.intent is not None and rec.intent.source == "operator"
    merged = mappings.exact_map({"rain": "text.translate"}, {rec.key: rec})
    assert merged["rain"].capability == "weather.forecast" and merged["rain"].confidence == 0.7
    for phrase, cap, conf in (("", "a.b", 1.0), ("x", "intent.resolve", 1.0), ("x", "a.b", 1.5)):
        with pytest.raises(IntentError):
            mappings.record(phrase, cap, confidence=conf)


def _receipt(message_id: str, status: Status, stage: str | None = None, result: bytes | None = None) -> Receipt:
    res = IntentResolution(stage=stage, intent="i") if stage else None
    return Receipt(message_id=message_id, trace_id="t", tenant="x", capability="c", status=status, at=1,
                   resolution=res, result=result)


def test_dual_first_valid_answer_wins_and_the_other_is_discarded() -> None:
    tracker = DualTracker()
    tracker.dispatched({"message_id": "p"}, {"a": "x.a", "b": "x.b"})
    waiting = tracker.answered(_receipt("a", Status.FAILED))  # b may still answer: only the pair's state is stored
    assert waiting is not None and waiting.action == "wait" and waiting.state is not None
    won = tracker.answered(_receipt("b", Status.COMPLETED))
    assert won is not None and won.action == "complete" and won.child_id == "b"
    tracker.dispatched({"message_id": "r"}, {"e": "x.a", "f": "x.b"})
    assert tracker.answered(_receipt("e", Status.FAILED)).action == "wait"  # type: ignore[union-attr]
    lost = tracker.answered(_receipt("f", Status.REJECTED))
    assert lost is not None and lost.action == "fail"
    tracker.dispatched({"message_id": "q"}, {"c": "x.a", "d": "x.b"})
    first = tracker.answered(_receipt("c", Status.COMPLETED))
    late = tracker.answered(_receipt("d", Status.COMPLETED))
    assert first is not None and first.action == "complete" and late is not None and late.action == "discard"
    assert tracker.answered(_receipt("d", Status.COMPLETED)) is None and len(tracker) == 0


def test_stats_shares_and_success_per_stage() -> None:
    receipts = [_receipt("1", Status.INTENT_RESOLVED, "exact"), _receipt("1", Status.COMPLETED),
                _receipt("2", Status.FAILED), _receipt("2", Status.INTENT_RESOLVED, "semantic"),  # terminal first
                _receipt("3", Status.INTENT_RESOLVED, "handoff"), _receipt("3", Status.COMPLETED, "human"),
                _receipt("4", Status.INTENT_RESOLVED, "handoff"), _receipt("4", Status.INTENT_RESOLVED, "handoff")]
    stats = fold(receipts)
    assert stats.total == 4 and stats.share("handoff") == 0.5
    assert stats.stages["semantic"].success() == 0.0 and stats.stages["exact"].success() == 1.0
    assert stats.stages["handoff"].human == 1 and stats.stages["handoff"].ended == 1


ENVELOPE = {"message_id": "m", "trace_id": "t", "tenant": "x", "capability": "intent.resolve", "intent": "rain?",
            "payload": b"{}", "created_at": 1, "deadline": 2, "delivery_timeout_ms": 1, "routing": {},
            "reply_to": None, "session_snapshot": "ns.sessions:s1"}


def test_plans_forward_children_or_a_handoff_bundle_and_moves_are_checked() -> None:
    assert dispatch.problem({**ENVELOPE, "intent": " "}) is not None
    assert dispatch.problem({**ENVELOPE, "capability": "a.b"}) is not None
    semantic = dispatch.plan(ENVELOPE, b"raw", Resolution("semantic", "rain?", "weather.forecast"), at=5,
                             reply_topic="ns.replies.r")
    assert [o.kind for o in semantic] == ["receipt", "forward"]
    assert semantic[0].value.status is Status.INTENT_RESOLVED and semantic[1].value["capability"] == "weather.forecast"
    dual = dispatch.plan(ENVELOPE, b"raw", Resolution("dual", "rain?", "a.b", dual=("a.b", "c.d")), at=5,
                         reply_topic="ns.replies.r")
    children = [o.value for o in dual if o.kind == "child"]
    assert {c["parent_id"] for c in children} == {"m"} and len({c["message_id"] for c in children}) == 2
    assert all(c["reply_to"] == "ns.replies.r" for c in children)
    handoff = dispatch.plan(ENVELOPE, b"raw", Resolution("handoff", "rain?", note="nothing"), at=5,
                            reply_topic="ns.replies.r")[1].value
    assert handoff.envelope_bytes() == b"raw" and handoff.session_snapshot == "ns.sessions:s1"
    taken = handoff.moved("TAKEN", by="ann", at=6)
    with pytest.raises(IntentError):
        taken.moved("TAKEN", by="bob", at=7)
    done = taken.moved("ANSWERED", by="ann", at=8, resolution="42")
    with pytest.raises(IntentError):
        done.moved("REROUTED", by="ann", at=9)
    assert dispatch.answer_result("plain words") == b'"plain words"' and dispatch.answer_result("[1]") == b"[1]"


def test_repeated_failures_lower_an_exact_mappings_confidence() -> None:
    from reach.intent.feedback import Feedback

    fb = Feedback(failures=2, step=0.25)
    for i in range(3):
        fb.sent(f"m{i}", "rain", "weather.forecast", 1.0, tenant="t")
    assert fb.ended("m0", Status.ROUTED) is None and fb.watching("m0")
    assert fb.ended("m0", Status.FAILED) is None
    assert fb.ended("m1", Status.COMPLETED) is None  # a success resets the run
    assert fb.ended("m2", Status.FAILED) is None and not fb.watching("m2")
    for i, caused_by_the_caller in enumerate((Status.REJECTED, Status.UNROUTABLE, Status.EXPIRED)):
        fb.sent(f"c{i}", "rain", "weather.forecast", 1.0, tenant="t")  # a bad payload, another tenant, a budget
        assert fb.ended(f"c{i}", caused_by_the_caller) is None  # neither counts against the mapping
    fb.sent("m3", "rain", "weather.forecast", 1.0, tenant="t")
    lowered = fb.ended("m3", Status.DEAD_LETTERED)
    assert lowered is not None and (lowered.phrase, lowered.confidence) == ("rain", 0.75)
    assert fb.ended("unknown", Status.FAILED) is None


def test_an_answer_that_arrives_before_its_pair_is_tracked_settles_the_pair_once_it_is() -> None:
    from reach.intent import dual

    tracker = DualTracker()
    early = _receipt("x1", Status.COMPLETED)
    assert tracker.answered(early) is None  # its request's write was refused: the pair is not tracked yet
    assert tracker.answered(_receipt("x1", Status.ROUTED)) is None  # not an answer: nothing kept
    [settled] = tracker.dispatched({"message_id": "p2"}, {"x0": "a.b", "x1": "c.d"})
    assert settled.action == "complete" and settled.child_id == "x1" and settled.parent["message_id"] == "p2"
    late = tracker.answered(_receipt("x0", Status.COMPLETED))
    assert late is not None and late.action == "discard" and late.state is None and len(tracker) == 0
    assert tracker.dispatched({"message_id": "p3"}, {"y0": "a.b", "y1": "c.d"}) == []  # nothing early for it
    for n in range(dual.EARLY_ANSWERS + 10):  # bounded: the oldest unknown answers go first
        tracker.answered(_receipt(f"z{n}", Status.FAILED))
    assert len(tracker._early) == dual.EARLY_ANSWERS and "z0" not in tracker._early


def test_early_answers_settle_in_arrival_order_and_repeats_of_settled_children_are_not_kept() -> None:
    from reach.intent import dual

    tracker = DualTracker()
    tracker.answered(_receipt("k1", Status.COMPLETED, result=b'"second branch, first to answer"'))
    tracker.answered(_receipt("k0", Status.COMPLETED, result=b'"first branch, later"'))
    first, second = tracker.dispatched({"message_id": "p4"}, {"k0": "a.b", "k1": "c.d"})
    assert (first.action, first.child_id) == ("complete", "k1")
    assert (second.action, second.child_id) == ("discard", "k0")
    tracker.answered(_receipt("k1", Status.COMPLETED))  # a repeat after the pair settled: nothing kept
    assert tracker.early == []
    restarted = DualTracker()  # a stored pair whose k0 ended before the restart; its answer comes again
    assert restarted.answered_all([_receipt("m0", Status.FAILED), _receipt("m1", Status.COMPLETED)]) == []
    record = dual.PairRecord(parent_id="p5", owner="r", parent={"message_id": "p5"},
                             children={"m0": "a.b", "m1": "c.d"}, ended={"m0": "FAILED"})
    [settled] = restarted.restore(record)
    assert (settled.action, settled.child_id) == ("complete", "m1") and restarted.early == []
    big = DualTracker()  # bounded by bytes too
    for n in range(40):
        big.answered(_receipt(f"b{n}", Status.COMPLETED, result=b"x" * (1024 * 1024)))
    assert sum(len(r.result or b"") for r in big.early) <= dual.EARLY_BYTES and big.early[-1].message_id == "b39"
