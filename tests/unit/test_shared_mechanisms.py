"""The mechanisms the agent, the gateway and the client share (the Redis script batcher, the reply pump) live below
all of them: they import no interface and neither the agent nor the gateway (docs/architecture.md)."""

from __future__ import annotations

from tests.unit.import_rules import ROOT, offending

SHARED_MECHANISMS = ("reach/redisbatch.py", "reach/redisclient.py", "reach/replypump.py", "reach/core/durations.py")
ABOVE = ("reach.agent", "reach.gateway", "reach.cli", "reach.console", "reach.a2a", "reach.invoke", "reach.client")


def test_the_shared_mechanisms_import_none_of_their_users() -> None:
    files = [ROOT / name for name in SHARED_MECHANISMS]
    assert all(f.exists() for f in files)
    problems = offending(files, lambda module: any(module == p or module.startswith(p + ".") for p in ABOVE))
    assert not problems, "a shared mechanism imports one of its users:\n" + "\n".join(problems)
