"""Admission before scoring: the stable hash, the canary arms and the HALF_OPEN / restore shares."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.admission import CANARY, STABLE, admit, admitted, canary_share, place
from reach.core.candidates import RouteRequest, select
from reach.records import BreakerState, CanaryState
from tests.unit.routing_fixtures import canary, health, reg

AGENT = "agent://echo/main"


def req(message_id: str = "m1", **kw: object) -> RouteRequest:
    return RouteRequest(message_id=message_id, capability="text.echo", **kw)  # type: ignore[arg-type]


def candidates(*regs: object) -> tuple:  # type: ignore[type-arg]
    return select(req(), regs).candidates  # type: ignore[arg-type]


def ids(admission_candidates: tuple) -> set[str]:  # type: ignore[type-arg]
    return {c.instance_id for c in admission_candidates}


ARMS = candidates(reg("old-1", build_version="1.0.0"), reg("old-2", build_version="1.0.0"),
                  reg("new", build_version="2.0.0"))


@given(st.text(min_size=1, max_size=40), st.text(max_size=20))
def test_place_is_stable_and_in_the_unit_interval(key: str, salt: str) -> None:
    first = place(key, salt)
    assert first == place(key, salt) and 0.0 <= first < 1.0


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.02, max_value=0.98), st.text(min_size=1, max_size=10))
def test_share_accuracy_over_many_ids(share: float, salt: str) -> None:
    n = 4_000
    inside = sum(admitted(f"01J{i:023d}", salt, share) for i in range(n))
    assert abs(inside / n - share) < 0.035, f"{inside}/{n} admitted for share {share}"  # ~4.5 sigma at n=4000


def test_share_edges() -> None:
    assert admitted("k", "s", 1.0) and not admitted("k", "s", 0.0)


def test_no_canary_no_arm() -> None:
    out = admit(req(), ARMS, health={}, canaries={})
    assert out.arm is None and out.note is None and ids(out.candidates) == {"old-1", "old-2", "new"}


def test_a_session_stays_on_its_arm() -> None:
    running = {AGENT: canary("2.0.0", steps=[50, 100])}
    for session in ("s-1", "s-2", "s-3", "s-4", "s-5", "s-6"):
        arms = {admit(req(f"m-{n}", session_key=session), ARMS, health={}, canaries=running).arm for n in range(20)}
        assert len(arms) == 1, f"session {session} changed arms: {arms}"


def test_arms_split_the_agent_by_build_version() -> None:
    running = {AGENT: canary("2.0.0", steps=[50, 100])}
    seen = {}
    for n in range(200):
        out = admit(req(f"m-{n}"), ARMS, health={}, canaries=running)
        seen[out.arm] = ids(out.candidates)
    assert seen == {CANARY: {"new"}, STABLE: {"old-1", "old-2"}}


def test_the_canary_hint_pins_the_canary_arm() -> None:
    running = {AGENT: canary("2.0.0", steps=[1, 100])}
    out = admit(req(canary=True), ARMS, health={}, canaries=running)
    assert out.arm == CANARY and ids(out.candidates) == {"new"} and "pinned" in (out.note or "")


def test_an_arm_without_candidates_yields_to_the_other() -> None:
    running = {AGENT: canary("3.0.0")}
    out = admit(req(canary=True), ARMS, health={}, canaries=running)
    assert out.arm == STABLE and ids(out.candidates) == {"old-1", "old-2", "new"}
    assert "has no candidate" in (out.note or "")


def test_rolled_back_never_reaches_the_canary_version() -> None:
    back = {AGENT: canary("2.0.0", state=CanaryState.ROLLED_BACK)}
    for n in range(100):
        out = admit(req(f"m-{n}", canary=n % 2 == 0), ARMS, health={}, canaries=back)
        assert ids(out.candidates) == {"old-1", "old-2"} and out.arm is None
    alone = admit(req(), candidates(reg("new", build_version="2.0.0")), health={}, canaries=back)
    assert alone.candidates == ()


def test_promoted_is_the_agent() -> None:
    done = {AGENT: canary("2.0.0", state=CanaryState.PROMOTED)}
    out = admit(req(), ARMS, health={}, canaries=done)
    assert ids(out.candidates) == {"new"} and out.arm is None and "promoted" in (out.note or "")
    alone = admit(req(), candidates(reg("old", build_version="1.0.0")), health={}, canaries=done)
    assert ids(alone.candidates) == {"old"}


def test_other_agents_are_not_split() -> None:
    mixed = candidates(reg("old", build_version="1.0.0"), reg("new", build_version="2.0.0"),
                       reg("other", agent_id="agent://other/x", build_version="2.0.0"))
    running = {AGENT: canary("2.0.0", steps=[50, 100])}
    for n in range(50):
        assert "other" in ids(admit(req(f"m-{n}"), mixed, health={}, canaries=running).candidates)


def test_canary_share_per_state() -> None:
    assert canary_share(canary(steps=[5, 20, 100], step=1)) == 0.20
    assert canary_share(canary(state=CanaryState.PROMOTED)) == 1.0
    assert canary_share(canary(state=CanaryState.ROLLED_BACK)) == 0.0


def test_half_open_admits_its_share_and_never_falls_back() -> None:
    pool = candidates(reg("probe"), reg("well"))
    probing = {"probe": health("probe", breaker=BreakerState.HALF_OPEN, admit=0.1)}
    reached = sum("probe" in ids(admit(req(f"m-{n}"), pool, health=probing, canaries={}).candidates)
                  for n in range(2_000))
    assert 120 < reached < 280, f"{reached}/2000 reached a HALF_OPEN instance admitting 10%"
    alone = candidates(reg("probe"))
    outs = [admit(req(f"m-{n}"), alone, health=probing, canaries={}) for n in range(100)]
    left_out = [a for a in outs if not a.candidates]
    assert 70 < len(left_out) < 100 and all(a.refused for a in left_out), "no fallback to a HALF_OPEN instance"


def test_a_restoring_instance_is_kept_when_nothing_else_is() -> None:
    restoring = {"back": health("back", admit=0.0)}
    assert ids(admit(req(), candidates(reg("back"), reg("well")), health=restoring, canaries={}).candidates) == {"well"}
    alone = admit(req(), candidates(reg("back")), health=restoring, canaries={})
    assert ids(alone.candidates) == {"back"} and "kept" in (alone.note or "")
