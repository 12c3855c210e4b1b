"""The exact intent -> capability map on the control topic (list, set, remove) and how intents were resolved
(stage shares folded from the receipts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reach import control, registry
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.intent import catalog, mappings
from reach.intent import stats as intent_stats
from reach.kafka import codec, headers, topicreader
from reach.kafka.acked import send_acked
from reach.kafka.worker import Output
from reach.names import Names
from reach.records import Control, Receipt
from reach.settings import KafkaSettings


def map_rows(names: Names, kafka: KafkaSettings, *, seeds: bool = True) -> list[dict[str, Any]]:
    """The exact map: the control topic's mappings (operator, handoff; `tenant` None: every tenant's), each tenant's
    learned confidences (source feedback, with its tenant) and, with `seeds`, the phrases seeded from live
    registrations that no mapping overrides; by capability, phrase, then tenant."""
    view = control.read_control(names=names, kafka=kafka)
    records = view.records()
    rows: list[dict[str, Any]] = [
        {"phrase": p, "capability": m.capability, "confidence": m.confidence, "source": m.source, "tenant": None}
        for p, m in mappings.operator_map(records).items()]
    if seeds:
        taken = {r["phrase"] for r in rows}
        live = registry.read_registry(kafka, names).live(now_ms())
        rows += [{"phrase": p, "capability": c, "confidence": mappings.SEED_CONFIDENCE, "source": "seed",
                  "tenant": None} for p, c in catalog.seeds(catalog.build(live)).items() if p not in taken]
    rows += [{"phrase": m.phrase, "capability": m.capability, "confidence": m.confidence, "source": m.source,
              "tenant": m.tenant} for m in mappings.learned_rows(records)]
    rows.sort(key=lambda r: (str(r["capability"]), str(r["phrase"]), r["tenant"] is not None, str(r["tenant"])))
    return rows


def set_mapping(phrase: str, capability: str, *, confidence: float, names: Names, kafka: KafkaSettings,
                by: str = "reach-cli") -> Control:
    """Map a phrase to a capability for every tenant, live (resolvers apply it within one poll of the control
    topic; what tenants' outcomes taught about the phrase before no longer applies): the record published."""
    record = mappings.record(phrase, capability, confidence=confidence, by=by)
    control.publish(record, names=names, kafka=kafka)
    return record


def remove_mapping(phrase: str, *, names: Names, kafka: KafkaSettings, by: str = "reach-cli") -> str:
    """Tombstone a phrase's mapping on the control topic (a seed for the phrase applies again), with every tenant's
    learned confidence in it: the key removed. The tombstones name `by` in a header (the audit history's actor)."""
    key = mappings.tombstone_key(phrase)
    learned = mappings.feedback_keys(phrase, control.read_control(names=names, kafka=kafka).records())
    errors = send_acked(kafka, [Output(names.control, None, key=removed.encode(), headers=[(headers.BY, by.encode())])
                                for removed in (key, *learned)], timeout=15)
    if errors:
        raise InfraUnavailable(f"The tombstone for {key} was not acknowledged ({', '.join(errors)}); check "
                               "REACH_BOOTSTRAP.")
    return key


def read_stats(names: Names, kafka: KafkaSettings, since_ms: int | None) -> intent_stats.IntentStats:
    """The receipts since `since_ms` (None: all) folded into stage shares."""
    reader = topicreader.open_reader("intent-stats", kafka)
    try:
        starts = topicreader.start_offsets(reader, names.receipts, since_ms)
        return intent_stats.fold(_receipts(m.value() for m in topicreader.read_range(
            reader, names.receipts, starts, idle_timeout=5.0)))
    finally:
        reader.close()


def _receipts(values: Iterator[bytes | None]) -> Iterator[Receipt]:
    """Decodable receipts; a bad record is skipped (counted by nothing here: `reach receipts sql` shows it)."""
    for value in values:
        if value is None:
            continue
        try:
            yield codec.decode(value, Receipt)
        except codec.DecodeError:
            continue
