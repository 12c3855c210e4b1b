"""The ROUTED receipt written straight to Avro bytes: the router's most frequent record, on its hot path.

fastavro spends ~40 µs on a ROUTED receipt, most of it resolving the Decision union and walking
five candidate records field by field. Here the constant parts are bytes computed once (header,
null fields, each instance's id strings, the factor names of the parts map, the weights map of each
FactorWeights) and the rest is a few varints and one struct.pack per candidate: its fixed doubles and
its whole parts map (the names ride in the struct as constant `s` fields). `RoutedReceiptWriter.create()`
checks its output against the codec on a sample and returns None when they differ (a changed Receipt
schema), so the router falls back to `encode_dict`. Not thread-safe: one writer per routing thread.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from reach.core.factors import FACTORS, INDEX, NAMES, FactorWeights
from reach.core.scoring import ScoreParts
from reach.kafka.codec import default_codec
from reach.kafka.receiptbytes import FIELDS as _FIELDS
from reach.kafka.receiptbytes import NULL as _NULL
from reach.kafka.receiptbytes import SOME as _SOME
from reach.kafka.receiptbytes import StringCache, checked, optional_long, optional_string, string, varint
from reach.records import Status

_DECISION = ("candidates", "picked_instance", "topic", "partition", "offset", "weights", "arm", "admission")
_CANDIDATE_TAIL = ("parts", "arm")  # after instance_id, agent_id and the fixed doubles (score, then legacy parts)
_DOUBLE = struct.Struct("<d")


class RoutedReceiptWriter:
    """Encodes ROUTED receipts exactly as `codec.encode_dict("Receipt", ...)` would, several times faster."""

    def __init__(self) -> None:
        codec = default_codec()
        self._header = codec._load("Receipt").header  # noqa: SLF001 - the single-object header, fingerprint included
        symbols = _enum_symbols(codec.schema("Receipt"), "status")
        self._routed = varint(symbols.index(Status.ROUTED.value))
        self._cached = StringCache()
        self._candidates: dict[tuple[str, str], bytes] = {}
        self._weights: dict[tuple[float, ...], bytes] = {}
        fixed = _candidate_doubles(codec.schema("Receipt"))  # score, fit, locality, load, affinity
        self._fixed_parts = itemgetter(*(INDEX[name] for name in fixed[1:]))
        # the parts map of one candidate: count, then name + double per factor, then the end of the map
        names = [string(name) for name in NAMES]
        names[0] = varint(len(NAMES)) + names[0]
        layout = "<" + "d" * len(fixed) + "".join(f"{len(n)}sd" for n in names) + "x"
        self._row = struct.Struct(layout + "x")  # and a null arm
        self._row_then_arm = struct.Struct(layout)
        self._template: list[object] = [value for n in names for value in (n, 0.0)]

    @classmethod
    def create(cls) -> RoutedReceiptWriter | None:
        """A writer whose output matches the codec on a sample, else None (use the codec)."""
        schema = default_codec().schema("Receipt")
        if [f["name"] for f in schema["fields"]] != list(_FIELDS) or _decision_fields(schema) != list(_DECISION):
            return None
        if default_codec().pinned("Receipt"):  # written as an older release reads them (REACH_RECORDS_WRITE_AS)
            return None
        return checked(cls, [_sample()], as_receipt)

    def encode(
        self,
        *,
        message_id: str,
        generation: int,
        trace_id: str,
        tenant: str,
        capability: str,
        attempt: int,
        at: int,
        deadline: int | None,
        delivery_timeout_ms: int | None,
        reroutes: int,
        agent_id: str,
        instance_id: str,
        scores: Sequence[ScoreParts],
        picked_instance: str,
        topic: str,
        partition: int | None,
        offset: int | None,
        weights: Mapping[str, float],
        arm: str | None = None,
        admission: str | None = None,
        callback: str | None = None,
    ) -> bytes:
        """The ROUTED receipt (as `as_receipt(...)` builds it) in single-object Avro; every ScoreParts carries
        one value per factor (reach.core.factors.FACTORS order)."""
        s = self._cached
        parts = [
            self._header, string(message_id), varint(generation), string(trace_id), s(tenant), s(capability),
            _SOME, s(agent_id), _SOME, s(instance_id), self._routed, varint(attempt), varint(at),
            b"\x00\x00\x00\x00\x00",  # error, retry_after_ms, result, step_status: null; timings: empty map
            _SOME, varint(len(scores)) if scores else b"",
        ]
        if scores:
            fixed, row, row_then_arm, values = self._fixed_parts, self._row, self._row_then_arm, self._template[:]
            for c in scores:
                parts.append(self._candidate(c.instance_id, c.agent_id))
                values[1::2] = c.parts
                if c.arm is None:
                    parts.append(row.pack(c.score, *fixed(c.parts), *values))
                else:
                    parts.append(row_then_arm.pack(c.score, *fixed(c.parts), *values))
                    parts.append(_SOME + s(c.arm))
        parts += [
            _NULL, _SOME, s(picked_instance), _SOME, s(topic),  # _NULL ends the candidates array
            optional_long(partition), optional_long(offset), self._weights_map(weights),
            optional_string(arm), optional_string(admission),
            # cost and due_at null; then deadline, delivery_timeout_ms, reroutes; reused_from, channel null; the
            # envelope's callback (a row must know it before an EXPIRED that no agent wrote); resolution (v6),
            # progress (v7), input (v8), usage (v9), fanout (v10) null
            _NULL, _NULL, optional_long(deadline), optional_long(delivery_timeout_ms), varint(reroutes), _NULL,
            _NULL, optional_string(callback), _NULL, _NULL, _NULL, _NULL, _NULL,
        ]
        return b"".join(parts)

    def _weights_map(self, weights: Mapping[str, float]) -> bytes:
        """The Decision.weights map, ending byte included; a FactorWeights' bytes are cached by its values."""
        key = weights.vector if isinstance(weights, FactorWeights) else None
        found = self._weights.get(key) if key is not None else None
        if found is not None:
            return found
        out = [varint(len(weights))] if weights else []
        for name, value in weights.items():
            out.append(self._cached(name))
            out.append(_DOUBLE.pack(value))
        out.append(_NULL)
        encoded = b"".join(out)
        if key is not None:
            if len(self._weights) > 1_000:
                self._weights.clear()
            self._weights[key] = encoded
        return encoded

    def _candidate(self, instance_id: str, agent_id: str) -> bytes:
        key = (instance_id, agent_id)
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) > 10_000:
                self._candidates.clear()
            found = self._candidates[key] = string(instance_id) + string(agent_id)
        return found


def as_receipt(**fields: Any) -> dict[str, Any]:
    """The dict `codec.encode_dict("Receipt", ...)` takes for the same ROUTED receipt (the reference)."""
    f = dict(fields)
    decision = {
        "candidates": [s.as_dict() for s in f.pop("scores")],
        "picked_instance": f.pop("picked_instance"), "topic": f.pop("topic"),
        "partition": f.pop("partition"), "offset": f.pop("offset"), "weights": dict(f.pop("weights")),
        "arm": f.pop("arm", None), "admission": f.pop("admission", None),
    }
    return {**f, "status": Status.ROUTED.value, "decision": decision}


def _enum_symbols(schema: dict[str, Any], field: str) -> list[str]:
    spec = next(f for f in schema["fields"] if f["name"] == field)["type"]
    return list(spec["symbols"])


def _candidate_doubles(schema: dict[str, Any]) -> list[str]:
    """The CandidateScore fields between the ids and the parts map: score, then the legacy factor fields."""
    decision = next(f for f in schema["fields"] if f["name"] == "decision")["type"][1]
    candidate = next(f for f in decision["fields"] if f["name"] == "candidates")["type"]["items"]
    names = [f["name"] for f in candidate["fields"]]
    if names[:2] != ["instance_id", "agent_id"] or names[-len(_CANDIDATE_TAIL):] != list(_CANDIDATE_TAIL):
        raise ValueError(f"unexpected CandidateScore fields {names}")
    return names[2:-len(_CANDIDATE_TAIL)]


def _decision_fields(schema: dict[str, Any]) -> list[str]:
    decision = next(f for f in schema["fields"] if f["name"] == "decision")["type"][1]
    return [f["name"] for f in decision["fields"]]


def _sample() -> dict[str, Any]:
    scores = [ScoreParts(f"i-{n}", "agent://a/b", 0.5 + n, tuple(0.1 * n + i / 10 for i in range(len(FACTORS))),
                         "canary" if n == 1 else None) for n in range(3)]
    return dict(message_id="01J0000000000000000000000Ö", generation=2, trace_id="t", tenant="default",
                capability="a.b", attempt=3, at=1_800_000_000_000, deadline=None, delivery_timeout_ms=5_000,
                reroutes=1, agent_id="agent://a/b", instance_id="i-1", scores=scores, picked_instance="i-1",
                topic="ns.agent.a.b", partition=7, offset=123_456_789, weights={"fit": 0.4, "load": -0.3},
                arm="stable", admission="breaker OPEN: i-9", callback='{"channel":"webhook"}')
