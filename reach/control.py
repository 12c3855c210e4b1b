"""Operator control records on the compacted control topic: build, publish and read them.

The view they fold into, and the scoping rules, are reach.core.views.controlview (pure).
"""

from __future__ import annotations

import logging

from reach.core.views.controlview import DEFAULT_WEIGHTS as DEFAULT_WEIGHTS
from reach.core.views.controlview import ControlView
from reach.core.views.controlview import key_of as key_of
from reach.core.views.controlview import weights_problem as weights_problem
from reach.envelopes import now_ms
from reach.kafka import topicreader
from reach.kafka.acked import send_acked
from reach.kafka.codec import RegistryUnavailable, decode, encode
from reach.kafka.worker import Output
from reach.names import Names
from reach.records import Control, ControlKind, InstanceAction, InstanceOverride, Policy, Weights
from reach.settings import KafkaSettings

log = logging.getLogger("reach.control")


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


def publish(control: Control, *, names: Names, kafka: KafkaSettings, timeout: float = 15.0) -> None:
    """Publish one control record and wait until the broker has it."""
    errors = send_acked(kafka, [Output(names.control, encode(control), key=control.key.encode())], timeout=timeout)
    if errors:
        from reach.errors import InfraUnavailable

        raise InfraUnavailable(
            f"The control record {control.key} was not acknowledged ({', '.join(errors)}). "
            "Check that the broker is up and `reach topics apply` has run."
        )


def read_control(*, names: Names, kafka: KafkaSettings, timeout: float = 10.0) -> ControlView:
    """Read the whole control topic into a view (for `reach weights show` and the SDK's policy cache)."""
    view = ControlView()
    reader = topicreader.open_reader("control", kafka)
    try:
        starts = topicreader.start_offsets(reader, names.control, None, timeout)
        for msg in topicreader.read_range(reader, names.control, starts, idle_timeout=timeout):
            apply_record(view, msg.key(), msg.value(), where=f"{names.control}@{msg.offset()}")
        return view
    finally:
        reader.close()


def apply_record(view: ControlView, key: bytes | None, value: bytes | None, *, where: str) -> bool:
    """Fold one control-topic record into the view; a bad one (undecodable, invalid for its kind, a key that
    is not UTF-8) is logged, counted in `view.refused` and skipped, never fatal. True when it applied.
    RegistryUnavailable propagates: skipping a good record during a registry outage would lose it."""
    text = (key or b"").decode(errors="replace")
    try:
        (key or b"").decode()
    except UnicodeDecodeError:  # no well-formed key could ever replace or tombstone it
        view.refused += 1
        log.warning("skipping a control record whose key %r is not UTF-8 at %s", text, where)
        return False
    try:
        return view.apply(text, decode(value, Control) if value is not None else None)
    except RegistryUnavailable:
        raise  # infrastructure, not a bad record: the caller reads again
    except Exception as exc:  # noqa: BLE001 - DecodeError, or a valid Avro record the model refuses
        view.refused += 1
        log.warning("skipping a bad control record %r at %s: %s", text, where, exc)
        return False
