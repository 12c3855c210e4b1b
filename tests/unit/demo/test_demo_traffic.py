"""The demo's traffic plan: every kind shows up, bad inputs and unservable requests come on a schedule."""

from __future__ import annotations

import random
from collections import Counter

from reach.tooling.demo.traffic import EXPECTED, NOBODY, ORDER, REGIONS, plan


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
