"""The product's `reach-*` marks on an envelope (reach.core.marks): a caller's are dropped at intake, the router's
and the status fold's survive only on the child they derived."""

from __future__ import annotations

from reach.core import fallback, fanout, marks, turns
from reach.envelopes import new_envelope

FORGED = {fanout.OF_HEADER: "victim", fallback.OF_HEADER: "victim", fallback.DEPTH_HEADER: "0",
          "Reach-Anything": "x", "app-header": "kept"}


def test_a_callers_reach_headers_are_dropped_by_new_envelope() -> None:
    """Security finding (forged fan-out parent): every intake builds with new_envelope, which keeps no `reach-*`."""
    envelope = new_envelope("demo.echo", {}, headers=dict(FORGED))
    assert envelope.headers == {"app-header": "kept"}


def test_a_derived_child_keeps_the_marks_its_id_proves_and_nothing_else() -> None:
    delivery = fanout.delivery_id("m1", 2, "agent://demo/notify")
    assert marks.kept(FORGED, message_id=delivery, to_agent="agent://demo/notify") == {
        "Reach-Anything": "x", "app-header": "kept"}, "the id derives from m1, not from the header's victim"
    headers = {fanout.OF_HEADER: "m1", fallback.DEPTH_HEADER: "1", turns.PREFER_HEADER: "i1"}
    assert marks.kept(headers, message_id=delivery, to_agent="agent://demo/notify") == headers
    assert marks.kept(headers, message_id=delivery, to_agent="agent://demo/audit") == {
        turns.PREFER_HEADER: "i1"}, "another agent's id: the lineage marks go, a next turn's marks travel on"
    child = fallback.child_id("m1", 3)
    assert marks.kept({fallback.OF_HEADER: "m1", fallback.DEPTH_HEADER: "2"}, message_id=child, to_agent=None) == {
        fallback.OF_HEADER: "m1", fallback.DEPTH_HEADER: "2"}
    assert marks.kept({fallback.OF_HEADER: "m2"}, message_id=child, to_agent=None) == {}


def test_only_the_exact_derived_forms_verify() -> None:
    agent = "agent://demo/notify"
    assert fanout.verified_parent("m1-s0-demo.notify", agent, "m1") == "m1"
    for forged in ("m1-s01-demo.notify", "m1-sx-demo.notify", "m1-s0-", "m1", "m10-s0-demo.notify"):
        assert fanout.verified_parent(forged, agent, "m1") is None, forged
    assert fanout.verified_parent("m1-s0-demo.notify", None, "m1") is None
    assert fallback.verified_parent("m1-fb0", "m1") == "m1"
    for forged in ("m1-fb", "m1-fb01", "m1-fbx", "m2-fb0"):
        assert fallback.verified_parent(forged, "m1") is None, forged
