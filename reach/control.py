"""Operator control records: routing weights, instance overrides and policies on the compacted control topic.

Keys are `<kind>:<scope>`. WEIGHTS and POLICY take a capability or `*` as scope (the capability's
record wins over `*`, `*` over the built-in defaults). INSTANCE records take the instance_id as
scope, so that overrides of different instances do not compact each other away; DRAIN and DISABLE
keep the router off the instance, ENABLE (or a tombstone) lifts the override.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Producer

from reach import topicreader
from reach.codec import DecodeError, decode, encode
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import Control, ControlKind, InstanceAction, InstanceOverride, Policy, Weights
from reach.settings import KafkaSettings

DEFAULT_WEIGHTS = Weights()


def key_of(kind: ControlKind, scope: str) -> str:
    return f"{kind}:{scope}"


class ControlView:
    """The latest control record per key, with lookups the router needs; safe to read from any thread."""

    def __init__(self) -> None:
        self._records: dict[str, Control] = {}
        self._lock = threading.Lock()
        self._disabled: frozenset[str] = frozenset()
        self.skipped = 0  # records of a kind or action newer than this reader's schema

    def apply(self, key: str, control: Control | None) -> None:
        """Apply one record of the control topic (None is a tombstone; a record not `understood` is skipped
        and counted, and the key keeps its previous record)."""
        if control is not None and not control.understood:
            self.skipped += 1
            return
        with self._lock:
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

    def disabled(self) -> frozenset[str]:
        """Instances kept out of routing by a DRAIN or DISABLE override."""
        return self._disabled


def weights_record(weights: Weights, *, scope: str = "*", by: str = "reach-cli") -> Control:
    return Control(kind=ControlKind.WEIGHTS, scope=scope, weights=weights, updated_at=now_ms(), updated_by=by)


def instance_record(instance_id: str, action: InstanceAction, *, by: str = "reach-cli") -> Control:
    return Control(
        kind=ControlKind.INSTANCE,
        scope=instance_id,
        instance=InstanceOverride(instance_id=instance_id, action=action),
        updated_at=now_ms(),
        updated_by=by,
    )


def policy_record(policy: Policy, *, scope: str = "*", by: str = "reach-cli") -> Control:
    return Control(kind=ControlKind.POLICY, scope=scope, policy=policy, updated_at=now_ms(), updated_by=by)


def publish(control: Control, *, names: Names, kafka: KafkaSettings | None = None, timeout: float = 15.0) -> None:
    """Publish one control record and wait until the broker has it."""
    producer = Producer((kafka or KafkaSettings()).producer())
    errors: list[str] = []

    def _report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer.produce(names.control, key=control.key.encode(), value=encode(control), on_delivery=_report)
    remaining = producer.flush(timeout)
    if remaining or errors:
        from reach.errors import InfraUnavailable

        raise InfraUnavailable(
            f"The control record {control.key} was not acknowledged ({', '.join(errors) or 'timed out'}). "
            "Check that the broker is up and `reach topics apply` has run."
        )


def read_control(*, names: Names, kafka: KafkaSettings | None = None, timeout: float = 10.0) -> ControlView:
    """Read the whole control topic into a view (for `reach weights show` and the SDK's policy cache)."""
    view = ControlView()
    reader = topicreader.open_reader("control", kafka)
    try:
        starts = topicreader.start_offsets(reader, names.control, None, timeout)
        for msg in topicreader.read_range(reader, names.control, starts, idle_timeout=timeout):
            value = msg.value()
            try:
                view.apply((msg.key() or b"").decode(), decode(value, Control) if value is not None else None)
            except DecodeError:
                pass  # an undecodable control record is skipped, never fatal
        return view
    finally:
        reader.close()
