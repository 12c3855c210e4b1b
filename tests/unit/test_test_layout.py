"""Test modules have unique basenames: tests/ has no packages, so pytest refuses two files of one name
(a clean clone fails at collection while a tree with stale __pycache__ may not)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
