"""Tooling, apart from the runtime: each package is a program of its own for developers and operators, never
imported by the runtime (`tests/unit/test_boundaries.py`).

- `bench/`: `reach bench`, the measurements behind docs/performance.md;
- `demo/`: `make demo` / `reach demo`, traffic on a local stack;
- `faults/`: `reach faults`, the fault suite behind docs/reliability.md;
- `local/`: `reach local up|down|status`, a local KRaft broker and Redis for development and tests.
"""
