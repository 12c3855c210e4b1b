"""An operator ending a canary (console or CLI): promoted jumps to the last step, rolled back stays where it was."""

from __future__ import annotations

from reach.core.canarybook import ended
from reach.records import Canary, CanaryState


def test_ending_a_canary_records_who_and_when() -> None:
    running = Canary(agent_id="agent://a", version="2", step=1, started_at=1, step_started_at=2)
    promoted = ended(running, CanaryState.PROMOTED, by="console:root", now_ms=9)
    assert (promoted.state, promoted.step, promoted.step_started_at) == (CanaryState.PROMOTED, 3, 9)
    assert promoted.reason == "PROMOTED by console:root"
    rolled = ended(running, CanaryState.ROLLED_BACK, by="reach-cli", now_ms=9)
    assert (rolled.state, rolled.step, rolled.reason) == (CanaryState.ROLLED_BACK, 1, "ROLLED_BACK by reach-cli")
