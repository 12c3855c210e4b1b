"""Rolling windows: sums over windows and since an instant, aligned slices, percentiles, expiry."""

from __future__ import annotations

from reach.core.healthmodel.windows import CapabilityLatency, Windows


def windows() -> Windows:
    return Windows(bucket_ms=1_000, keep_ms=300_000, samples=100, latency_ms=60_000)


def test_counts_over_a_window_and_since() -> None:
    w = windows()
    for at in (500, 1_500, 2_500, 59_500):
        w.add(at, ok=at != 1_500)
    all_of_it = w.counts(60_000, 60_000)
    assert (all_of_it.calls, all_of_it.ok) == (4, 3)
    assert all_of_it.success == 0.75
    assert w.counts(60_000, 10_000).calls == 1
    since = w.counts(60_000, 60_000, since=1_200)  # the bucket holding `since` is left out
    assert (since.calls, since.ok) == (2, 2)
    assert w.counts(60_000, 60_000, since=61_000).success is None


def test_out_of_order_calls_join_their_bucket() -> None:
    w = windows()
    w.add(5_100, ok=True)
    w.add(3_100, ok=False)
    w.add(5_900, ok=True)
    assert w.counts(6_000, 2_000).calls == 2
    assert w.counts(6_000, 10_000).calls == 3


def test_slices_are_aligned_complete_windows() -> None:
    w = windows()
    for at in range(0, 5_000, 250):
        w.add(at, ok=True, slow=at % 1_000 < 500)
    slices = w.slices(5_100, 1_000, 5)
    assert [(s.calls, s.slow) for s in slices] == [(4, 2)] * 5
    assert len(w.slices(5_100, 1_000, 5, since=2_000)) == 3


def test_percentiles_and_expiry() -> None:
    w = windows()
    for i in range(1, 101):
        w.add(i, ok=True, run_ms=i)
    w.add(200, ok=False, run_ms=9_999)  # failures carry no latency
    assert w.percentiles(0.5, 0.95) == [50.0, 95.0]
    w.expire(400_000)
    assert w.empty and w.percentiles(0.5) == [None]


def test_capability_p50_refreshes_at_most_every_interval() -> None:
    lat = CapabilityLatency(samples=100, latency_ms=60_000, refresh_ms=1_000)
    for ms in (10, 20, 30):
        lat.add(0, ms)
    assert lat.p50(0) == 20.0
    lat.add(1, 1_000)
    lat.add(1, 1_000)
    assert lat.p50(500) == 20.0
    assert lat.p50(1_000) == 30.0
