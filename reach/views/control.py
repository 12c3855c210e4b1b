"""The control view: the latest operator record per `<kind>:<scope>` key, with the lookups the router needs.

Keys are `<kind>:<scope>`. WEIGHTS and POLICY take a capability or `*` as scope (the capability's
record wins over `*`, `*` over the built-in defaults). INSTANCE records take the instance_id as
scope, so that overrides of different instances do not compact each other away; DRAIN and DISABLE
keep the router off the instance, ENABLE (or a tombstone) lifts the override. A WEIGHTS record whose
weights cannot score (NaN, infinite, negative, all zero) counts as absent, so the wider scope applies.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

from reach.records import Control, ControlKind, InstanceAction, Policy, Weights

log = logging.getLogger("reach.control")
DEFAULT_WEIGHTS = Weights()


def key_of(kind: ControlKind, scope: str) -> str:
    return f"{kind}:{scope}"


def weights_problem(weights: Weights) -> str | None:
    """Why these weights cannot score a candidate, or None when they can."""
    values = {"fit": weights.fit, "locality": weights.locality, "load": weights.load, "affinity": weights.affinity}
    shown = " ".join(f"{k}={v}" for k, v in values.items())
    if not all(math.isfinite(v) for v in values.values()):
        return f"weights must be finite numbers; got {shown}"
    if min(values.values()) < 0 or sum(values.values()) == 0:
        return f"weights must be >= 0 and not all zero; got {shown}"
    return None


class ControlView:
    """The latest usable control record per key; safe to read from any thread."""

    def __init__(self) -> None:
        self._records: dict[str, Control] = {}
        self._lock = threading.Lock()
        self._disabled: frozenset[str] = frozenset()
        self.refused = 0
        self.skipped = 0  # records of a kind or action newer than this reader's schema

    def apply(self, key: str, control: Control | None) -> bool:
        """Apply one record of the control topic (None is a tombstone; unusable weights count as one and are
        counted in `refused`; a record this reader does not understand is counted in `skipped` and the key
        keeps its previous record). False when the record was refused or skipped."""
        if control is not None and not control.understood:
            self.skipped += 1
            return False
        problem = weights_problem(control.weights) if control is not None and control.weights is not None else None
        with self._lock:
            if problem is not None:
                self.refused += 1
                log.warning("control record %s ignored: %s", key, problem)
                control = None
            if control is None:
                self._records.pop(key, None)
            else:
                self._records[key] = control
            self._disabled = frozenset(
                c.instance.instance_id
                for c in self._records.values()
                if c.kind is ControlKind.INSTANCE
                and c.instance is not None
                and c.instance.action in (InstanceAction.DRAIN, InstanceAction.DISABLE)
            )
        return problem is None

    def records(self) -> dict[str, Control]:
        with self._lock:
            return dict(self._records)

    def weights(self, capability: str) -> Weights:
        """The capability's weights, else the `*` weights, else the defaults 0.4/0.2/0.3/0.1."""
        records = self._records
        for scope in (capability, "*"):
            found = records.get(key_of(ControlKind.WEIGHTS, scope))
            if found is not None and found.weights is not None:
                return found.weights
        return DEFAULT_WEIGHTS

    def policy(self, capability: str) -> Policy:
        """The capability's policy with unset fields taken from the `*` policy."""
        records = self._records
        merged: dict[str, Any] = {}
        for scope in ("*", capability):
            found = records.get(key_of(ControlKind.POLICY, scope))
            if found is not None and found.policy is not None:
                merged.update(found.policy.model_dump(exclude_unset=True, exclude_none=True))
        return Policy(**merged)

    def policy_sources(self, capability: str) -> dict[str, str]:
        """Per POLICY field, the scope its value in `policy(capability)` comes from (`capability` or `*`); a field
        missing here takes the built-in default."""
        sources: dict[str, str] = {}
        for scope in ("*", capability):
            found = self._records.get(key_of(ControlKind.POLICY, scope))
            if found is not None and found.policy is not None:
                sources.update(dict.fromkeys(found.policy.model_dump(exclude_unset=True, exclude_none=True), scope))
        return sources

    def instance_action(self, instance_id: str) -> InstanceAction | None:
        """The operator's DRAIN or DISABLE in force for this instance (ENABLE, none or unknown: None)."""
        found = self._records.get(key_of(ControlKind.INSTANCE, instance_id))
        if found is None or found.instance is None:
            return None
        action = found.instance.action
        return action if action in (InstanceAction.DRAIN, InstanceAction.DISABLE) else None

    def disabled(self) -> frozenset[str]:
        """Instances kept out of routing by a DRAIN or DISABLE override."""
        return self._disabled
