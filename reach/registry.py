"""Reading the compacted registry topic into a RegistryView (the view itself is reach.core.views.registryview)."""

from __future__ import annotations

import logging

from reach.core.views.registryview import InstanceInfo as InstanceInfo
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable, ReachError
from reach.kafka import codec, topicreader
from reach.names import Names
from reach.records import AgentRegistration
from reach.settings import KafkaSettings

log = logging.getLogger("reach.registry")


def read_registry(kafka: KafkaSettings, names: Names, timeout: float = 10) -> RegistryView:
    """Read the registry topic from the beginning to its current end (assign, no consumer group)."""
    view = RegistryView()
    reader = topicreader.open_reader("registry", kafka)
    try:
        try:
            starts = topicreader.start_offsets(reader, names.registry, None, timeout)
        except InfraUnavailable:
            raise
        except ReachError:
            raise InfraUnavailable(f"Registry topic {names.registry} is missing; run `reach topics apply`.") from None
        for msg in topicreader.read_range(reader, names.registry, starts, idle_timeout=timeout):
            apply_record(view, msg.key(), msg.value())
        return view
    finally:
        reader.close()


def apply_record(view: RegistryView, key: bytes | None, value: bytes | None) -> bool:
    """Fold one registry record; a keyless or undecodable one is skipped (never fatal). True when applied."""
    if key is None:
        return False
    instance_id = key.decode(errors="replace")
    try:
        view.apply(instance_id, codec.decode(value, AgentRegistration) if value is not None else None)
        return True
    except codec.RegistryUnavailable:
        raise  # infrastructure, not a bad record
    except Exception as exc:  # noqa: BLE001 - DecodeError, or a valid Avro record the model refuses
        log.warning("skipping a bad registry record for %r: %s", instance_id, exc)
        return False
