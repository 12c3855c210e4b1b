"""The control view: the latest operator record per `<kind>:<scope>` key, with the lookups the router needs.

Keys are `<kind>:<scope>`. WEIGHTS and POLICY take a capability or `*` as scope (the capability's
record wins over `*`, `*` over the built-in defaults). INSTANCE records take the instance_id as
scope, so that overrides of different instances do not compact each other away; DRAIN and DISABLE
keep the router off the instance, ENABLE (or a tombstone) lifts the override. A WEIGHTS record whose
weights cannot score (NaN, infinite, negative, all zero) counts as absent, so the wider scope applies.
A WEIGHTS record is resolved once, when applied, into reach.core.factors.FactorWeights: its factors map first,
else its fixed fields, else each factor's default; names in the map that no factor has are kept, ignored
by scoring, counted in `unknown_factors` and logged once per name.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from typing import Any

from reach.core.factors import DEFAULT_WEIGHTS, FactorWeights, as_factor_weights
from reach.records import Control, ControlKind, InstanceAction, Policy, Weights

log = logging.getLogger("reach.control")
__all__ = ["DEFAULT_WEIGHTS", "ControlView", "key_of", "weights_problem"]


def key_of(kind: ControlKind, scope: str) -> str:
    return f"{kind}:{scope}"


def weights_problem(weights: Weights | Mapping[str, float]) -> str | None:
    """Why these weights cannot score a candidate, or None when they can: every weight in the map (unknown
    names too) must be a finite number >= 0, and the factors this reader knows must not all be 0."""
    resolved = as_factor_weights(weights)
    values = {**resolved, **resolved.unknown}
    shown = " ".join(f"{k}={v}" for k, v in values.items())
    if not all(math.isfinite(v) for v in values.values()):
        return f"weights must be finite numbers; got {shown}"
    if min(values.values()) < 0 or sum(resolved.values()) == 0:
        return f"weights must be >= 0 and not all zero; got {shown}"
    return None


class ControlView:
    """The latest usable control record per key; safe to read from any thread."""

    def __init__(self) -> None:
        self._records: dict[str, Control] = {}
        self._weights: dict[str, FactorWeights] = {}  # WEIGHTS keys, resolved once when applied
        self._lock = threading.Lock()
        self._disabled: frozenset[str] = frozenset()
        self.refused = 0
        self.skipped = 0  # records of a kind or action newer than this reader's schema
        self.unknown_factors = 0  # WEIGHTS records naming factors this reader does not score (kept, ignored)
        self._unknown_logged: set[str] = set()
        self.version = 0  # moves on every record applied: what a reader derived from the view holds while it stays

    def apply(self, key: str, control: Control | None) -> bool:
        """Apply one record of the control topic (None is a tombstone; unusable weights count as one and are
        counted in `refused`; a record this reader does not understand is counted in `skipped` and the key
        keeps its previous record). False when the record was refused or skipped."""
        if control is not None and not control.understood:
            self.skipped += 1
            return False
        weights = None
        if control is not None and control.weights is not None:
            weights = FactorWeights.of(control.weights, scope=control.scope)
        problem = weights_problem(weights) if weights is not None else None
        if weights is not None and problem is None and weights.unknown:
            self._note_unknown(key, weights.unknown)
        with self._lock:
            self.version += 1
            if problem is not None:
                self.refused += 1
                log.warning("control record %s ignored: %s", key, problem)
                control = None
            if control is None:
                self._records.pop(key, None)
                self._weights.pop(key, None)
            else:
                self._records[key] = control
                if weights is not None:
                    self._weights[key] = weights
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

    def weights(self, capability: str) -> FactorWeights:
        """The weight of every factor for the capability: its WEIGHTS record, else the `*` record, else the
        defaults (reach.core.factors); each factor's `source` says which."""
        resolved = self._weights
        for scope in (capability, "*"):
            found = resolved.get(key_of(ControlKind.WEIGHTS, scope))
            if found is not None:
                return found
        return DEFAULT_WEIGHTS

    def _note_unknown(self, key: str, unknown: Mapping[str, float]) -> None:
        self.unknown_factors += 1
        new = unknown.keys() - self._unknown_logged
        if new:
            self._unknown_logged |= new
            log.warning("control record %s weighs factor(s) this router does not know: %s (kept, not scored)",
                        key, ", ".join(sorted(new)))

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
