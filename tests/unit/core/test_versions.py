"""Semver ranges decide which capability versions a caller can reach."""

import pytest

from reach.core.versions import BadVersion, parse_range, satisfies


@pytest.mark.parametrize(("version", "rng", "ok"), [
    ("1.2.0", "^1.2", True), ("1.9.9", "^1.2", True), ("2.0.0", "^1.2", False), ("1.1.9", "^1.2", False),
    ("0.2.5", "^0.2", True), ("0.3.0", "^0.2", False),
    ("1.2.9", "~1.2.3", True), ("1.3.0", "~1.2.3", False),
    ("1.4.0", "1.x", True), ("2.0.0", "1.x", False), ("7.0.0", "*", True), ("7.0.0", "", True),
    ("1.5.0", ">=1.0 <2", True), ("2.0.0", ">=1.0 <2", False), ("1.5.0", ">=1.0.0, <2.0.0", True),
    ("3.1.0", "^1 || ^3", True), ("2.1.0", "^1 || ^3", False),
    ("1.0.0", "1.0.0", True), ("1.0.1", "1.0.0", False), ("1.0.1", "1.0", True),
    ("2.0.0-beta.1", "^1", False), ("1.5.0", "1.0 - 2.0", True),
])
def test_satisfies(version: str, rng: str, ok: bool) -> None:
    assert satisfies(version, rng) is ok


@pytest.mark.parametrize("bad", ["^one", ">>1", "1.2.3.4", "latest"])
def test_bad_ranges_are_refused_with_an_example(bad: str) -> None:
    with pytest.raises(BadVersion, match="expected e.g."):
        parse_range(bad)
