"""What a capability declares, applied to one request before and after its handler runs (docs/decisions/0075).

Before: `contract_problem` REJECTS a request checked against a contract this instance does not serve (the
envelope's `schema_version`, reach.core.contracts); `request_key` is the content-hash idempotency key of a request
to an `idempotent` capability that names no key of its own. After: `after_run` turns an attempt that Reach cut
(an execution or heartbeat timeout) of a capability that does not declare `idempotent` into a terminal FAILED
`MAYBE_RAN` carrying the attempt's evidence, instead of a retry that would run the handler a second time. Each
is one call from the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reach.agent.agent import CapabilitySpec
from reach.agent.outcomes import Outcome, Verdict, rejected
from reach.core.contracts import content_key, mismatch
from reach.records import Envelope, ErrorInfo

MAYBE_RAN = "MAYBE_RAN"
CUT = frozenset({"EXECUTION_TIMEOUT", "HEARTBEAT_TIMEOUT"})  # the run timers' codes (reach.agent.runtimer)


def contract_problem(envelope: Envelope, spec: CapabilitySpec) -> Verdict | None:
    """REJECTED (SCHEMA_VERSION_MISMATCH) when the request was checked against a contract this instance's version
    does not satisfy; None when it may run (or names no contract)."""
    why = mismatch(spec.record.version, envelope.schema_version)
    return None if why is None else rejected("SCHEMA_VERSION_MISMATCH", f"{envelope.capability}: {why}")


def request_key(envelope: Envelope, spec: CapabilitySpec) -> str | None:
    """The content key of a request to an idempotent capability whose caller named no idempotency_key (the
    envelope's key is its message_id then); None otherwise (its own key, or a capability not declared idempotent)."""
    if not spec.record.idempotent:
        return None
    own = envelope.idempotency_key
    if own and own != envelope.message_id:
        return None
    return content_key(capability=envelope.capability, version=envelope.schema_version or spec.record.version,
                       payload=envelope.payload, content_type=envelope.content_type, tenant=envelope.tenant,
                       source=envelope.source, session_key=envelope.routing.session_key)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one attempt is known to have done by the time it was cut."""

    instance_id: str
    started_ms: int
    run_ms: int
    started_sent: bool  # its STARTED receipt went out
    progress_sent: int  # PROGRESS receipts it published
    children_sent: int  # requests its handler built through the client SDK

    def timings(self) -> dict[str, int]:
        return {"maybe_ran_started_at": self.started_ms, "maybe_ran_run_ms": self.run_ms,
                "maybe_ran_started_receipt": int(self.started_sent), "maybe_ran_progress": self.progress_sent,
                "maybe_ran_children": self.children_sent}


def after_run(verdict: Verdict, spec: CapabilitySpec, evidence: Callable[[], Evidence]) -> Verdict:
    """The verdict as published: unchanged, except an attempt cut by its timer of a capability not declared
    idempotent, which ends FAILED MAYBE_RAN (never retried: the handler may have done part or all of its work)."""
    error = verdict.error
    if verdict.outcome is not Outcome.RETRY or error is None or error.code not in CUT or spec.record.idempotent:
        return verdict
    seen = evidence()
    receipts = ", ".join([*(["STARTED"] if seen.started_sent else []),
                          *([f"{seen.progress_sent} PROGRESS"] if seen.progress_sent else [])]) or "none"
    message = (f"{error.code} after {seen.run_ms} ms on {seen.instance_id} (started at {seen.started_ms} epoch ms; "
               f"receipts sent: {receipts}; child requests sent: {seen.children_sent}): the handler may have run in "
               f"part or in full, and {spec.record.name} does not declare idempotent, so it is not retried. Check "
               "its effects before sending it again, or declare the capability idempotent=True if running it twice "
               f"is harmless. ({error.message})")
    return Verdict(Outcome.FAIL, error=ErrorInfo(kind="TIMEOUT", code=MAYBE_RAN, message=message[:1000]),
                   evidence=seen.timings())
