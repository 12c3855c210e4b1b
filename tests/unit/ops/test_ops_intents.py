"""The exact map's use cases (`reach intents ls | set | rm`, the console) with tenants' learned confidences
(issue 28, finding 5): listed with their tenant apart from the global mappings, removed with their mapping."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from reach.intent import mappings
from reach.kafka.worker import Output
from reach.names import Names
from reach.ops import intents as ops
from reach.records import Control
from reach.settings import KafkaSettings

NAMES = Names("t")


def test_learned_confidences_are_listed_with_their_tenant(control_topic: list[Control]) -> None:
    ops.set_mapping("Rain soon", "weather.forecast", confidence=1.0, names=NAMES, kafka=KafkaSettings())
    control_topic.append(mappings.feedback_record("acme", "rain soon", "weather.forecast", confidence=0.75, by="r"))
    control_topic.append(mappings.record("old phrase", "text.translate", confidence=0.5, source="feedback", by="r"))
    rows = ops.map_rows(NAMES, KafkaSettings(), seeds=False)
    assert rows == [
        {"phrase": "rain soon", "capability": "weather.forecast", "confidence": 1.0, "source": "operator",
         "tenant": None},
        {"phrase": "rain soon", "capability": "weather.forecast", "confidence": 0.75, "source": "feedback",
         "tenant": "acme"}]  # an older resolver's global feedback record is no mapping of anyone's


def test_removing_a_mapping_removes_the_tenants_learned_confidences(control_topic: list[Control],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, bytes | str | None, bytes | None]] = []

    def send_acked(_kafka: KafkaSettings, outputs: Iterable[Output], *, timeout: float) -> list[str]:
        sent.extend((o.topic, o.key, o.value) for o in outputs)
        return []

    monkeypatch.setattr(ops, "send_acked", send_acked)
    ops.set_mapping("rain soon", "weather.forecast", confidence=1.0, names=NAMES, kafka=KafkaSettings())
    for tenant in ("acme", "beta"):
        control_topic.append(mappings.feedback_record(tenant, "rain soon", "weather.forecast", confidence=0.5, by="r"))
    control_topic.append(mappings.feedback_record("acme", "other", "weather.forecast", confidence=0.5, by="r"))
    kafka = KafkaSettings(bootstrap="127.0.0.1:9")  # the fake producer connects nowhere
    assert ops.remove_mapping("Rain Soon", names=NAMES, kafka=kafka) == "INTENT:rain soon"
    assert sent == [(NAMES.control, key, None) for key in (
        b"INTENT:rain soon", b"INTENT_FEEDBACK:acme:rain soon", b"INTENT_FEEDBACK:beta:rain soon")]
