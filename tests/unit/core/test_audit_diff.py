"""The audit diff (reach.core.audit): which record changes are events, with actor, before and after."""

from __future__ import annotations

import json

import pytest

from reach.core.audit import (
    AUTOMATIC,
    AuditBook,
    BadAuditQuery,
    check_range,
    matches,
    parse_kinds,
)
from reach.records import (
    AgentRegistration,
    AgentState,
    App,
    AppKey,
    AuditEvent,
    AuditKind,
    BreakerState,
    Canary,
    Capability,
    Control,
    ControlKind,
    InstanceAction,
    InstanceHealth,
    InstanceOverride,
    Policy,
    SpendLimit,
)

NOW = 1_780_000_000_000


def reg(version: str = "1.0", *, state: AgentState = AgentState.READY, beat: int = NOW, inflight: int = 0,
        caps: tuple[str, ...] = ("search.web",), weight: float = 1.0) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://search/web", instance_id="i-1", build_version=version,
                             capabilities=[Capability(name=c, version="1") for c in caps], state=state,
                             heartbeat_at=beat, ttl_ms=10_000, inflight=inflight, weight=weight,
                             inbox_topic="reach.agent.search.web")


def policy(by: str, at: int, **fields: int) -> Control:
    return Control(kind=ControlKind.POLICY, scope="search.web", policy=Policy(**fields), updated_at=at, updated_by=by)


def kinds(events: list[AuditEvent]) -> list[AuditKind]:
    return [e.kind for e in events]


def test_a_join_a_heartbeat_an_upgrade_and_a_leave() -> None:
    book = AuditBook()
    [join] = book.registration("i-1", reg(), ts_ms=NOW, source="r[0]@0")
    assert (join.kind, join.actor, join.before, join.agent_id, join.at) == (AuditKind.JOIN, "i-1", None,
                                                                           "agent://search/web", NOW)
    assert json.loads(join.after or "")["build_version"] == "1.0"
    # a heartbeat rewrites heartbeat_at and inflight: no change anyone asked about
    assert book.registration("i-1", reg(beat=NOW + 5_000, inflight=3), ts_ms=NOW, source="r[0]@1") == []
    [upgrade] = book.registration("i-1", reg("1.1", beat=NOW + 9_000), ts_ms=NOW, source="r[0]@2")
    assert (upgrade.kind, upgrade.before, upgrade.after, upgrade.at) == (AuditKind.VERSION, '"1.0"', '"1.1"',
                                                                          NOW + 9_000)
    [leave] = book.registration("i-1", None, ts_ms=NOW + 20_000, source="r[0]@3")
    assert (leave.kind, leave.after, leave.at) == (AuditKind.LEAVE, None, NOW + 20_000)
    assert json.loads(leave.before or "")["build_version"] == "1.1"


def test_one_registration_changing_several_aspects_is_one_event_each() -> None:
    book = AuditBook()
    book.registration("i-1", reg(), ts_ms=NOW, source="")
    events = book.registration("i-1", reg(state=AgentState.DRAINING, caps=("search.web", "search.news"),
                                          weight=2.0), ts_ms=NOW, source="")
    assert kinds(events) == [AuditKind.CAPABILITIES, AuditKind.STATE, AuditKind.REGISTRATION]
    assert json.loads(events[0].after or "") == ["search.news@1", "search.web@1"]
    assert (events[1].before, events[1].after) == ('"READY"', '"DRAINING"')
    assert (json.loads(events[2].before or ""), json.loads(events[2].after or "")) == ({"weight": 1.0},
                                                                                      {"weight": 2.0})


def test_a_policy_change_names_its_operator_and_both_bodies() -> None:
    book = AuditBook()
    [first] = book.control("POLICY:search.web", policy("reach-cli:ana", NOW, max_attempts=3), ts_ms=0, source="")
    assert (first.before, json.loads(first.after or "")["policy"]["max_attempts"]) == (None, 3)
    [second] = book.control("POLICY:search.web", policy("console:bo", NOW + 1, max_attempts=5), ts_ms=0, source="")
    assert (second.kind, second.actor, second.at) == (AuditKind.POLICY, "console:bo", NOW + 1)
    assert json.loads(second.before or "")["policy"]["max_attempts"] == 3
    assert json.loads(second.after or "")["policy"]["max_attempts"] == 5
    # published again as it was (a retry, a re-apply): nothing changed
    assert book.control("POLICY:search.web", policy("console:bo", NOW + 2, max_attempts=5), ts_ms=0, source="") == []


def test_a_drain_names_the_instance_and_its_agent_and_its_removal_is_automatic() -> None:
    book = AuditBook()
    book.registration("i-1", reg(), ts_ms=NOW, source="")
    drain = Control(kind=ControlKind.INSTANCE, scope="i-1", updated_at=NOW, updated_by="reach-cli:ana",
                    instance=InstanceOverride(instance_id="i-1", action=InstanceAction.DRAIN))
    [event] = book.control("INSTANCE:i-1", drain, ts_ms=NOW, source="")
    assert (event.kind, event.instance_id, event.agent_id, event.actor) == (
        AuditKind.INSTANCE, "i-1", "agent://search/web", "reach-cli:ana")
    assert json.loads(event.after or "") == {"instance": {"action": "DRAIN", "instance_id": "i-1"}}
    [gone] = book.control("INSTANCE:i-1", None, ts_ms=NOW + 7, source="")
    assert (gone.actor, gone.after, gone.at) == (AUTOMATIC, None, NOW + 7)


def test_a_tombstone_names_who_removed_it_when_the_header_says() -> None:
    book = AuditBook()
    canary = Canary(agent_id="agent://a/b", version="2", started_at=NOW, step_started_at=NOW)
    book.control("CANARY:agent://a/b", Control(kind=ControlKind.CANARY, scope="agent://a/b", canary=canary,
                                               updated_at=NOW, updated_by="x"), ts_ms=NOW, source="")
    [gone] = book.control("CANARY:agent://a/b", None, ts_ms=NOW, source="", removed_by="reach-cli:ana")
    assert (gone.kind, gone.agent_id, gone.actor) == (AuditKind.CANARY, "agent://a/b", "reach-cli:ana")
    assert book.control("CANARY:agent://a/b", None, ts_ms=NOW, source="") == []  # nothing left to remove


def test_a_record_this_reader_cannot_understand_keeps_the_old_one() -> None:
    book = AuditBook()
    book.control("POLICY:*", policy("a", NOW, max_attempts=1), ts_ms=0, source="")
    unknown = Control(kind=ControlKind.UNKNOWN, scope="*", updated_at=NOW, updated_by="future")
    assert book.control("POLICY:*", unknown, ts_ms=0, source="") == []
    [event] = book.control("POLICY:*", policy("b", NOW, max_attempts=2), ts_ms=0, source="")
    assert json.loads(event.before or "")["policy"]["max_attempts"] == 1


def health(breaker: BreakerState = BreakerState.CLOSED, *, ejected_until: int | None = None,
           calls: int = 0) -> InstanceHealth:
    return InstanceHealth(instance_id="i-1", agent_id="agent://search/web", at=NOW, breaker=breaker,
                          ejected_until=ejected_until, calls_1m=calls, reason="5 failures in a row")


def test_breaker_ejection_and_restore_are_automatic_and_probing_is_no_event() -> None:
    book = AuditBook()
    assert book.health("i-1", health(), ts_ms=NOW, source="") == []
    assert book.health("i-1", health(calls=50), ts_ms=NOW, source="") == []  # rolling figures only
    [out] = book.health("i-1", health(BreakerState.OPEN), ts_ms=NOW, source="")
    assert (out.kind, out.actor, json.loads(out.after or "")["reason"]) == (AuditKind.EJECTED, AUTOMATIC,
                                                                          "5 failures in a row")
    assert book.health("i-1", health(BreakerState.HALF_OPEN), ts_ms=NOW, source="") == []
    [back] = book.health("i-1", health(), ts_ms=NOW, source="")
    assert back.kind is AuditKind.RESTORED
    [ejected] = book.health("i-1", health(ejected_until=NOW + 30_000), ts_ms=NOW, source="")
    assert ejected.kind is AuditKind.EJECTED
    assert kinds(book.health("i-1", health(), ts_ms=NOW, source="")) == [AuditKind.RESTORED]


def app(*, role: str | None = None, rate: float = 10.0, secret: bytes = b"s1", at: int = NOW) -> App:
    return App(app_id="app-1", name="shop", tenant="t", rate=rate, burst=20, role=role, created_at=NOW,
               updated_at=at, updated_by="reach-cli:ana",
               keys=[AppKey(key_id="k1", sealed_secret=secret, created_at=NOW)])


def test_apps_and_operators_are_audited_without_their_secrets() -> None:
    book = AuditBook()
    [made] = book.app("app-1", app(), ts_ms=NOW, source="")
    assert (made.kind, made.actor) == (AuditKind.APP, "reach-cli:ana")
    assert "s1" not in (made.after or "") and "sealed" not in (made.after or "")
    assert book.app("app-1", app(secret=b"s2", at=NOW + 1), ts_ms=NOW, source="") == []  # resealed only
    [quota] = book.app("app-1", app(rate=5.0), ts_ms=NOW, source="")
    assert (json.loads(quota.before or "")["rate"], json.loads(quota.after or "")["rate"]) == (10.0, 5.0)
    [op] = book.app("op-1", app(role="admin"), ts_ms=NOW, source="")
    assert op.kind is AuditKind.OPERATOR


def test_a_book_seeded_with_the_events_diffs_like_the_book_that_wrote_them() -> None:
    writer, events = AuditBook(), []
    drain = Control(kind=ControlKind.INSTANCE, scope="i-1", updated_at=NOW, updated_by="a",
                    instance=InstanceOverride(instance_id="i-1", action=InstanceAction.DRAIN))
    events += writer.registration("i-1", reg(), ts_ms=NOW, source="")
    events += writer.registration("i-1", reg("1.1", state=AgentState.DRAINING, weight=3.0), ts_ms=NOW, source="")
    events += writer.control("INSTANCE:i-1", drain, ts_ms=NOW, source="")
    events += writer.health("i-1", health(BreakerState.OPEN), ts_ms=NOW, source="")
    events += writer.app("op-1", app(role="viewer"), ts_ms=NOW, source="")
    events += writer.registration("i-2", reg(), ts_ms=NOW, source="")
    events += writer.registration("i-2", None, ts_ms=NOW, source="")
    reader = AuditBook()
    for event in events:
        reader.seed(event)
    for book in (writer, reader):  # nothing new in these; each a change from the view the events left
        assert book.registration("i-1", reg("1.1", state=AgentState.DRAINING, weight=3.0, beat=NOW + 60_000),
                                 ts_ms=NOW, source="") == []
        assert book.control("INSTANCE:i-1", drain, ts_ms=NOW, source="") == []
        assert book.health("i-1", health(BreakerState.OPEN, calls=9), ts_ms=NOW, source="") == []
        assert book.app("op-1", app(role="viewer", secret=b"new"), ts_ms=NOW, source="") == []
        assert kinds(book.registration("i-2", reg(), ts_ms=NOW, source="")) == [AuditKind.JOIN]
    # a replayed record (read before the committed offset) never overrides what the audit says
    assert reader.registration("i-1", reg("0.9"), ts_ms=NOW, source="", replay=True) == []
    assert kinds(reader.registration("i-1", reg("1.2", state=AgentState.DRAINING, weight=3.0), ts_ms=NOW,
                                     source="")) == [AuditKind.VERSION]


def test_kinds_parse_in_any_case_repeated_or_comma_separated() -> None:
    assert parse_kinds(["join,Version", "POLICY", ""]) == {AuditKind.JOIN, AuditKind.VERSION, AuditKind.POLICY}
    assert parse_kinds([]) == frozenset()


@pytest.mark.parametrize("bad", ["jion", "unknown", "policy,nope"])
def test_an_unknown_kind_is_refused_with_the_list(bad: str) -> None:
    with pytest.raises(BadAuditQuery, match="is not an audit kind. Use one or more of: join, leave"):
        parse_kinds([bad])


def test_a_bad_time_range_is_refused() -> None:
    with pytest.raises(BadAuditQuery, match="--since is in the future"):
        check_range(NOW + 1, None, NOW)
    with pytest.raises(BadAuditQuery, match="--until must be later than --since"):
        check_range(NOW - 10, NOW - 20, NOW)
    check_range(NOW - 10, NOW, NOW)
    check_range(None, None, NOW)


def test_the_filters() -> None:
    event = AuditEvent(at=NOW, kind=AuditKind.INSTANCE, subject="INSTANCE:i-1", instance_id="i-1",
                       agent_id="agent://a/b", actor="x")
    assert matches(event)
    assert matches(event, agent="i-1") and matches(event, agent="agent://a/b")
    assert not matches(event, agent="i-2")
    assert matches(event, kinds=frozenset({AuditKind.INSTANCE}))
    assert not matches(event, kinds=frozenset({AuditKind.POLICY}))
    assert matches(event, since_ms=NOW, until_ms=NOW + 1)
    assert not matches(event, since_ms=NOW + 1) and not matches(event, until_ms=NOW)


def test_an_instance_silent_for_two_ttls_is_evicted_once_and_its_return_is_a_state_change() -> None:
    book = AuditBook()
    book.registration("i-1", reg(), ts_ms=NOW, source="")
    assert book.evictions(["i-1"], now_ms=NOW + 20_000) == []  # 2 x ttl exactly: not yet
    [evicted] = book.evictions(["i-1"], now_ms=NOW + 20_001)
    assert (evicted.kind, evicted.actor, evicted.agent_id, evicted.at) == (AuditKind.EVICTED, "reach",
                                                                          "agent://search/web", NOW + 20_000)
    assert json.loads(evicted.before or "") == {"state": "READY", "heartbeat_at": NOW}
    assert json.loads(evicted.after or "")["state"] == "OFFLINE"
    assert book.evictions(["i-1"], now_ms=NOW + 90_000) == []  # once per silence
    [back] = book.registration("i-1", reg(beat=NOW + 95_000), ts_ms=NOW, source="")
    assert (back.kind, back.actor, back.before, back.after) == (AuditKind.STATE, "i-1", '"OFFLINE"', '"READY"')
    assert book.evictions(["i-1"], now_ms=NOW + 96_000) == []


def test_only_the_named_keys_an_instance_that_reports_offline_and_a_left_one_are_never_evicted() -> None:
    book = AuditBook()
    book.registration("i-1", reg(), ts_ms=NOW, source="")
    assert book.evictions([], now_ms=NOW + 60_000) == []  # a partition not read to its end: its keys are not named
    book.registration("i-2", reg(state=AgentState.OFFLINE), ts_ms=NOW, source="")
    book.registration("i-3", reg(), ts_ms=NOW, source="")
    book.registration("i-3", None, ts_ms=NOW, source="")
    assert [e.subject for e in book.evictions(["i-1", "i-2", "i-3", "i-9"], now_ms=NOW + 60_000)] == ["i-1"]


def test_a_book_seeded_with_an_eviction_does_not_evict_again() -> None:
    writer = AuditBook()
    events = writer.registration("i-1", reg(), ts_ms=NOW, source="")
    events += writer.evictions(["i-1"], now_ms=NOW + 60_000)
    reader = AuditBook()
    for event in events:
        reader.seed(event)
    assert reader.registration("i-1", reg(), ts_ms=NOW, source="", replay=True) == []  # its last heartbeat, replayed
    assert reader.evictions(["i-1"], now_ms=NOW + 120_000) == []
    assert kinds(reader.registration("i-1", reg(beat=NOW + 130_000), ts_ms=NOW, source="")) == [AuditKind.STATE]


def test_a_change_of_an_apps_spend_limits_is_audited() -> None:
    book = AuditBook()
    book.app("app-1", app(), ts_ms=NOW, source="")
    limited = app().model_copy(update={"limits": [SpendLimit(kind="tokens", amount=1000, period="day")]})
    [changed] = book.app("app-1", limited, ts_ms=NOW, source="")
    assert "limits" not in json.loads(changed.before or "")
    assert json.loads(changed.after or "")["limits"] == [{"kind": "tokens", "amount": 1000, "period": "day"}]


def test_the_actor_says_how_far_it_can_be_believed() -> None:
    """Issue 37, finding 11: the history's actor is what the record's writer named (REACH_OPERATOR, --by): only the
    console's logged-in operator is authenticated, and the history says which is which."""
    from reach.core.audit import ASSERTED, AUTHENTICATED, PLATFORM, actor_source

    assert actor_source("console:ada") == AUTHENTICATED
    assert [actor_source(a) for a in ("reach-cli:ada", "reach-cli", "console:", "app_1", "i-123")] == [ASSERTED] * 5
    assert actor_source("reach") == PLATFORM
