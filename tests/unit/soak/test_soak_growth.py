"""The soak's growth criterion: a least-squares line over the last half, held to max(share x level, floor)."""

from __future__ import annotations

import pytest

from reach.tooling.soak.growth import BOUNDS, Kind, bounds_text, judge, slope

RUN_S = 3600.0
EVERY = 30.0


def series(value_at: object, *, start: float = 0.0, end: float = RUN_S) -> list[tuple[float, float]]:
    f = value_at  # (t) -> value
    out, t = [], start
    while t <= end:
        out.append((t, float(f(t))))  # type: ignore[operator]
        t += EVERY
    return out


def test_slope_is_the_least_squares_slope() -> None:
    assert slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert slope([(0, 5), (10, 5), (20, 5)]) == 0.0
    assert slope([(0, 1)]) == 0.0 and slope([(3, 1), (3, 9)]) == 0.0  # no line through one time


def test_a_leak_that_never_stops_grows() -> None:
    leak = series(lambda t: 200 + t / 60)  # +1 MiB a minute: +30 MiB across the last half of an hour
    verdict = judge("rss_mib router", Kind.RSS, leak, duration_s=RUN_S)
    assert verdict.judged and verdict.grows
    assert verdict.rise == pytest.approx(30.0, rel=0.01)
    assert verdict.allowed == pytest.approx(BOUNDS[Kind.RSS].allowed(verdict.level or 0.0))


def test_growth_that_levels_off_in_the_first_half_passes() -> None:
    warm = series(lambda t: min(100 + t / 10, 250))  # rises for 25 minutes, flat afterwards
    verdict = judge("rss_mib agent", Kind.RSS, warm, duration_s=RUN_S)
    assert verdict.judged and not verdict.grows
    assert verdict.rise == pytest.approx(0.0, abs=1e-6)


def test_noise_within_the_bound_passes_and_the_floor_protects_small_series() -> None:
    noisy = series(lambda t: 40 + (3 if int(t / EVERY) % 2 else -3))  # +-3 fds around 40, no trend
    assert not judge("open_fds router", Kind.FDS, noisy, duration_s=RUN_S).grows
    creeping = series(lambda t: 40 + t / 180)  # +10 fds across the last half: above the 8-fd floor
    assert judge("open_fds router", Kind.FDS, creeping, duration_s=RUN_S).grows


def test_one_more_topic_in_the_last_half_is_growth() -> None:
    topics = series(lambda t: 30 if t < 2700 else 31)
    assert judge("topics namespace", Kind.TOPICS, topics, duration_s=RUN_S).grows
    assert not judge("topics namespace", Kind.TOPICS, series(lambda t: 30), duration_s=RUN_S).grows


def test_a_process_not_alive_through_the_last_half_is_shown_not_judged() -> None:
    churned = series(lambda t: 100 + t, start=1710, end=1920)  # a churned agent's last minutes
    verdict = judge("rss_mib agent churned pid 7", Kind.RSS, churned, duration_s=RUN_S)
    assert not verdict.judged and not verdict.grows
    assert verdict.why_not == "not alive through the last half"
    assert verdict.rise is not None  # its fit is still reported


def test_a_process_started_at_the_last_half_is_not_judged_on_its_warm_up() -> None:
    """A 4-minute soak restarts an agent at 120 s, the last half's first second: its first sample (15 MiB, just
    started) against its working size read as growth."""
    restarted = series(lambda t: 15 if t == 1800 else 105 + (t - 1800) / 1000, start=1800)
    verdict = judge("rss_mib agent churned pid 8", Kind.RSS, restarted, duration_s=RUN_S)
    assert not verdict.judged and not verdict.grows
    assert verdict.why_not == "started in the last half"


def test_ttl_bound_stores_are_judged_only_past_their_horizon() -> None:
    keys = series(lambda t: 70 * min(t, 1800))  # each key lives 30 min: rises until then, flat afterwards
    judged = judge("redis_keys redis", Kind.REDIS_KEYS, keys, duration_s=RUN_S, ttl_s=1800)
    assert judged.judged and not judged.grows
    short = series(lambda t: 70 * t, end=180)  # 3 minutes: still rising, and the horizon is far away
    early = judge("redis_keys redis", Kind.REDIS_KEYS, short, duration_s=180, ttl_s=1800)
    assert not early.judged and "TTL horizon" in early.why_not
    assert judge("rss_mib router", Kind.RSS, short, duration_s=180, ttl_s=1800).judged  # not TTL-bound


def test_too_few_samples_are_not_judged() -> None:
    verdict = judge("rss_mib router", Kind.RSS, [(0, 1), (100, 2), (150, 9)], duration_s=180)
    assert not verdict.judged and verdict.why_not == "fewer than 3 samples in the last half"


def test_every_kind_has_a_bound_and_the_help_names_it() -> None:
    assert set(BOUNDS) == set(Kind)
    text = bounds_text()
    assert all(k.value in text for k in Kind)
