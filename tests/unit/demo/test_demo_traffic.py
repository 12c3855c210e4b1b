"""The demo's traffic plan: every kind shows up, bad inputs and unservable requests come on a schedule."""

from __future__ import annotations

import random
from collections import Counter

from reach.tooling.demo.traffic import CAPABILITIES, ECHO, EXPECTED, FALLBACKS, LEGACY, NOBODY, ORDER, REGIONS, plan


def test_a_minute_of_traffic_has_every_kind_and_bad_inputs_are_few() -> None:
    rng = random.Random(7)
    kinds = Counter(plan(tick, 25.0, rng).kind for tick in range(25 * 60))
    assert set(kinds) == set(EXPECTED)
    bad = sum(n for kind, n in kinds.items() if kind.startswith("bad:"))
    assert bad == 15  # one every 4 s
    assert kinds["nobody serves it"] + kinds["nobody serves it, expire_at set"] == 30  # one every 2 s


def test_bad_inputs_and_no_route_arrive_within_the_first_seconds() -> None:
    rng = random.Random(1)
    first = [plan(tick, 25.0, rng) for tick in range(25 * 5)]
    assert any(p.kind.startswith("bad:") for p in first[:25])
    assert any(p.capability == NOBODY for p in first[:25])
    assert any(p.expire_in_ms for p in first if p.capability == NOBODY)


def test_a_session_keeps_its_region() -> None:
    rng = random.Random(3)
    regions: dict[str, set[str | None]] = {}
    for tick in range(2000):
        p = plan(tick, 25.0, rng)
        if p.session_key:
            regions.setdefault(p.session_key, set()).add(p.region)
    assert regions and all(len(r) == 1 and r <= set(REGIONS) for r in regions.values())


def test_low_rates_still_schedule_every_kind_of_bad_input() -> None:
    rng = random.Random(5)
    kinds = {plan(tick, 1.0, rng).kind for tick in range(60)}
    assert {"bad: undecodable bytes", "bad: empty capability", "bad: version range"} <= kinds


def test_an_order_event_goes_out_every_two_seconds_to_be_fanned_out() -> None:
    rng = random.Random(9)
    orders = [p for p in (plan(tick, 25.0, rng) for tick in range(25 * 60)) if p.capability == ORDER]
    assert len(orders) == 30 and {p.kind for p in orders} == {"order event, fanned out to audit + notify"}
    assert all(isinstance(p.payload["order_id"], str) for p in orders)


def test_a_legacy_request_goes_out_every_four_seconds_without_hiding_another_periodic_kind() -> None:
    rng = random.Random(11)
    planned = [plan(tick, 25.0, rng) for tick in range(25 * 60)]
    legacy = [p for p in planned if p.capability == LEGACY]
    assert len(legacy) == 15 and {p.kind for p in legacy} == {"legacy, served by its fallback (echo)"}
    kinds = Counter(p.kind for p in planned)
    assert kinds["order event, fanned out to audit + notify"] == 30
    assert kinds["streamed answer (5 chunks)"] == kinds["two-turn conversation"] == 20  # one each every 3 s
    assert FALLBACKS == {LEGACY: ECHO} and LEGACY in CAPABILITIES  # its topic exists before the router starts


def test_at_one_request_a_second_the_legacy_slot_and_the_other_periodic_kinds_each_keep_a_tick() -> None:
    rng = random.Random(2)
    capabilities = [plan(tick, 1.0, rng).capability for tick in range(4)]
    assert capabilities[1:] == [ORDER, NOBODY, LEGACY]
