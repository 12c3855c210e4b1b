"""Canary promotion (pure): the rule that promotes, rolls back or holds a canary, and the per-step tally.

The canary arm's success rate over the current step is counted from receipts: a COMPLETED receipt of
an instance of the agent running the canary build version is a success, its FAILED or ATTEMPT_FAILED
receipt a failure (router receipts name no instance and are not counted). The rule, judged on every
tick by the single controller (reach.streams.canary.controller):

- rollback as soon as the step has at least `min_calls` calls and success < min_success;
- promote when the step lasted step_ms, has at least `min_calls` calls and success >= min_success:
  the next step starts (its share from `steps`), or after the last step the canary is PROMOTED;
- otherwise hold: a step with too few calls lasts until it has them.

Callbacks are judged too (the callback-rate gate): a canary-arm COMPLETED whose request carries a callback
expects a CALLBACKED receipt on the same message (the channel delivered the outcome); one that has none within
`callback_grace_ms` is a missed callback. Once a step has `min_calls` callbacks settled (delivered or missed), a
callback rate below `min_callback` rolls it back like a low success rate, and a step whose callbacks are still in
flight is not promoted before they settle (or reach the grace). A step with no callbacks is judged on success
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from reach.core.admission import canary_share
from reach.records import AgentRegistration, Canary, CanaryState, Control, ControlKind, Receipt, Status

DEFAULT_STEPS = (5, 20, 50, 100)
DEFAULT_MIN_CALLS = 10
DEFAULT_MIN_CALLBACK = 0.95
DEFAULT_CALLBACK_GRACE_MS = 60_000
PENDING_MOST = 100_000  # callbacks awaited per step: beyond it the oldest is settled as missed


class Verdict(StrEnum):
    """What the rule says about a running canary now."""

    HOLD = "hold"
    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class Gate:
    """How a step is judged (REACH_CANARY_*): calls before a verdict, and the callback gate."""

    min_calls: int = DEFAULT_MIN_CALLS
    min_callback: float = DEFAULT_MIN_CALLBACK
    callback_grace_ms: int = DEFAULT_CALLBACK_GRACE_MS


@dataclass(slots=True)
class ArmTally:
    """Calls and successes of the canary arm within one step, and its callbacks: delivered, missed, awaited
    (message_id -> when its COMPLETED was written)."""

    calls: int = 0
    successes: int = 0
    callbacked: int = 0
    missed: int = 0
    awaited: dict[str, int] = field(default_factory=dict)

    @property
    def success(self) -> float | None:
        return self.successes / self.calls if self.calls else None

    @property
    def callbacks(self) -> int:
        """Callbacks settled: delivered or missed."""
        return self.callbacked + self.missed

    @property
    def callback_rate(self) -> float | None:
        return self.callbacked / self.callbacks if self.callbacks else None

    def expect(self, message_id: str, at: int) -> None:
        if len(self.awaited) >= PENDING_MOST:
            self.awaited.pop(next(iter(self.awaited)))
            self.missed += 1
        self.awaited.setdefault(message_id, at)

    def settle(self, now_ms: int, grace_ms: int) -> None:
        """Callbacks awaited longer than the grace are missed."""
        late = [m for m, at in self.awaited.items() if now_ms - at >= grace_ms]
        for message_id in late:
            del self.awaited[message_id]
        self.missed += len(late)


def judge(canary: Canary, tally: ArmTally, now_ms: int, *, gate: Gate = Gate()) -> Verdict:
    """The promotion rule (module docstring)."""
    if canary.state is not CanaryState.RUNNING:
        return Verdict.HOLD
    enough = max(gate.min_calls, 1)
    if tally.callbacks >= enough and tally.callbacked / tally.callbacks < gate.min_callback:
        return Verdict.ROLLBACK
    if tally.calls < enough:
        return Verdict.HOLD
    rate = tally.successes / tally.calls
    if rate < canary.min_success:
        return Verdict.ROLLBACK
    if now_ms - canary.step_started_at >= canary.step_ms and not tally.awaited:
        return Verdict.PROMOTE
    return Verdict.HOLD


def advance(canary: Canary, verdict: Verdict, tally: ArmTally, now_ms: int) -> Canary:
    """The canary record after a PROMOTE or ROLLBACK verdict."""
    summary = describe(canary, tally, now_ms)
    if verdict is Verdict.ROLLBACK:
        return canary.model_copy(update={"state": CanaryState.ROLLED_BACK, "reason": f"rolled back: {summary}"})
    if verdict is not Verdict.PROMOTE:
        return canary
    if canary.step + 1 >= len(canary.steps):
        return canary.model_copy(update={"state": CanaryState.PROMOTED, "step_started_at": now_ms,
                                         "reason": f"promoted: {summary}"})
    return canary.model_copy(update={"step": canary.step + 1, "step_started_at": now_ms,
                                     "reason": f"step {canary.step + 1} passed: {summary}"})


def ended(canary: Canary, state: CanaryState, *, by: str, now_ms: int) -> Canary:
    """A running canary ended by an operator now (PROMOTED: its last step; ROLLED_BACK: as it is)."""
    update: dict[str, object] = {"state": state, "step_started_at": now_ms, "reason": f"{state} by {by}"}
    if state is CanaryState.PROMOTED:
        update["step"] = len(canary.steps) - 1
    return canary.model_copy(update=update)


def describe(canary: Canary, tally: ArmTally, now_ms: int) -> str:
    """One line on the current step: its share, the canary arm's success so far, what it needs."""
    rate = "no calls yet" if tally.success is None else f"{tally.successes}/{tally.calls} ok ({tally.success:.1%})"
    if tally.callbacks or tally.awaited:
        rate += f", callbacks {tally.callbacked}/{tally.callbacks} delivered"
        rate += f" ({len(tally.awaited)} awaited)"
    took = max(now_ms - canary.step_started_at, 0) / 1000
    return (f"step {canary.step + 1}/{len(canary.steps)} at {canary_share(canary):.0%}: {rate} over {took:.0f}s; "
            f"needs >= {canary.min_success:.0%} over {canary.step_ms / 1000:g}s")


def canaries(records: Mapping[str, Control]) -> dict[str, Canary]:
    """The canary of each agent among control records (key `CANARY:<agent_id>`)."""
    return {c.canary.agent_id: c.canary for c in records.values()
            if c.kind is ControlKind.CANARY and c.canary is not None}


_FAILURES = frozenset({Status.FAILED, Status.ATTEMPT_FAILED})


@dataclass
class CanaryBook:
    """What the controller folds: build versions by instance, the canaries, each running canary's step tally."""

    builds: dict[str, tuple[str, str]] = field(default_factory=dict)  # instance_id -> (agent_id, build_version)
    running: dict[str, Canary] = field(default_factory=dict)
    tallies: dict[str, ArmTally] = field(default_factory=dict)

    def registration(self, instance_id: str, registration: AgentRegistration | None) -> None:
        if registration is None:
            return  # a stopped canary instance's late receipts still count for its arm
        self.builds[instance_id] = (registration.agent_id, registration.build_version)

    def canary(self, agent_id: str, canary: Canary | None) -> None:
        """A canary record (None: its tombstone); a new step or state starts a fresh tally."""
        old = self.running.get(agent_id)
        if canary is None or canary.state is not CanaryState.RUNNING:
            self.running.pop(agent_id, None)
            self.tallies.pop(agent_id, None)
            return
        self.running[agent_id] = canary
        if old is None or (old.version, old.step, old.step_started_at) != (
                canary.version, canary.step, canary.step_started_at):
            self.tallies[agent_id] = ArmTally()

    def receipt(self, receipt: Receipt) -> None:
        if receipt.status is Status.CALLBACKED:
            self._callbacked(receipt.message_id)
            return
        if receipt.instance_id is None or receipt.status not in _FAILURES and receipt.status is not Status.COMPLETED:
            return
        agent_id, build = self.builds.get(receipt.instance_id, (receipt.agent_id or "", ""))
        canary = self.running.get(agent_id)
        if canary is None or build != canary.version or receipt.at < canary.step_started_at:
            return
        tally = self.tallies.setdefault(agent_id, ArmTally())
        tally.calls += 1
        tally.successes += receipt.status is Status.COMPLETED
        if receipt.status is Status.COMPLETED and receipt.callback:
            tally.expect(receipt.message_id, receipt.at)

    def _callbacked(self, message_id: str) -> None:
        """A CALLBACKED receipt (on the original message): the arm awaiting it has one more callback delivered."""
        for tally in self.tallies.values():
            if tally.awaited.pop(message_id, None) is not None:
                tally.callbacked += 1
                return

    def due(self, now_ms: int, *, gate: Gate = Gate()) -> list[Canary]:
        """The records to write now: each running canary the rule promotes or rolls back."""
        out = []
        for agent_id, canary in self.running.items():
            tally = self.tallies.get(agent_id, ArmTally())
            tally.settle(now_ms, gate.callback_grace_ms)
            verdict = judge(canary, tally, now_ms, gate=gate)
            if verdict is not Verdict.HOLD:
                out.append(advance(canary, verdict, tally, now_ms))
        return out

    def progress(self, now_ms: int) -> list[Canary]:
        """Each running canary with `reason` describing its step so far (what `reach canary status` shows)."""
        return [c.model_copy(update={"reason": describe(c, self.tallies.get(a, ArmTally()), now_ms)})
                for a, c in self.running.items()]
