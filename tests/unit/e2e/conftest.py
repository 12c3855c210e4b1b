"""The in-memory request path (tests/unit/e2e/memory_stack.py) as a fixture."""

from __future__ import annotations

from tests.unit.e2e.memory_stack import stack

__all__ = ["stack"]
