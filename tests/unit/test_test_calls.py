"""Tests call the product the way it is called now.

Wave 2 changed signatures (settings passed in at entry points); a test merged from an older branch
still called `clients.admin()` without its settings and failed only against the broker, in CI. mypy
on `tests/` finds that class of mistake in seconds, without a broker. The tests are not fully typed,
so only the errors that mean "this call no longer matches the function" fail here.

mypy keeps its incremental cache under the user's cache directory (beside the broker's jars), not in the
checkout: a clean clone's CI run then re-checks only what changed since the last run (mypy validates every cached
module against its source's hash, so the answer is the same as a cold run's; a cold run takes ~45 s).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL_ERRORS = re.compile(r"^(tests/\S+): error: (.*)\[(call-arg|name-defined)\]$")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agent-reach" / "mypy-tests"


def test_no_test_calls_a_function_with_arguments_it_no_longer_takes() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy", "-p", "tests", "--ignore-missing-imports",
                           "--python-version", "3.11", "--no-error-summary",
                           "--cache-dir", str(CACHE)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    stale = [line for line in done.stdout.splitlines() if CALL_ERRORS.match(line)]
    assert not stale, "\n".join(stale)
    assert "error: Duplicate module" not in done.stdout, done.stdout[-2000:]
