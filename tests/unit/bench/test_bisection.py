"""The knee search's bisection: the knee it returns, its resolution, and the bounds it checks."""

from __future__ import annotations

import pytest

from reach.tooling.bench.bisection import search


def below(knee: float) -> tuple[list[float], object]:
    tried: list[float] = []

    def passes(rate: float) -> bool:
        tried.append(rate)
        return rate <= knee

    return tried, passes


def test_finds_the_knee_within_the_resolution() -> None:
    tried, passes = below(1_234)
    found = search(passes, low=50, high=8_000, resolution=0.05)  # type: ignore[arg-type]
    assert found.knee is not None and found.failed_at is not None
    assert found.knee <= 1_234 < found.failed_at
    assert found.failed_at <= found.knee * 1.05
    assert [r for r, _ in found.tried] == tried
    assert all(ok == (r <= 1_234) for r, ok in found.tried)


def test_each_step_is_a_whole_rate_strictly_inside_the_bracket() -> None:
    _, passes = below(300)
    found = search(passes, low=10, high=5_000, resolution=0.001)  # type: ignore[arg-type]
    assert all(r == int(r) for r, _ in found.tried)
    assert found.knee == 300 and found.failed_at == 301  # stops when no whole rate lies between


def test_checks_low_when_every_step_failed() -> None:
    tried, passes = below(5)
    found = search(passes, low=20, high=2_000, resolution=0.1)  # type: ignore[arg-type]
    assert tried[-1] == 20
    assert found.knee is None and found.failed_at == 20
    assert found.bracket == "< 20"


def test_low_passing_after_every_step_failed_is_the_knee() -> None:
    _, passes = below(21)
    found = search(passes, low=20, high=2_000, resolution=0.5)  # type: ignore[arg-type]
    assert found.knee == 20 and found.failed_at is not None and found.failed_at <= 30
    assert found.tried[-1] == (20, True)


def test_checks_high_when_every_step_passed() -> None:
    tried, passes = below(10_000)
    found = search(passes, low=20, high=2_000, resolution=0.1)  # type: ignore[arg-type]
    assert tried[-1] == 2_000
    assert found.knee == 2_000 and found.failed_at is None
    assert found.bracket == ">= 2000"


def test_a_bracket_already_narrower_than_the_resolution_checks_both_bounds() -> None:
    tried, passes = below(100)
    found = search(passes, low=100, high=105, resolution=0.1)  # type: ignore[arg-type]
    assert tried == [100, 105]
    assert found.knee == 100 and found.failed_at == 105 and found.bracket == "[100, 105)"


@pytest.mark.parametrize("low,high,resolution", [(0, 10, 0.1), (10, 10, 0.1), (20, 10, 0.1), (10, 20, 0)])
def test_rejects_bad_bounds(low: float, high: float, resolution: float) -> None:
    with pytest.raises(ValueError):
        search(lambda _r: True, low=low, high=high, resolution=resolution)
