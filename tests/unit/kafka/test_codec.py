"""reach.kafka.codec frames every record as Avro single-object encoding and resolves old writers by fingerprint."""

from __future__ import annotations

import itertools
import json
import shutil
from io import BytesIO
from pathlib import Path
from typing import Any, cast

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form

from reach.errors import ReachError
from reach.kafka import codec
from reach.kafka.codec import (
    MARKER,
    SCHEMA_ROOT,
    BadFraming,
    Codec,
    ConfluentCodec,
    CorruptBody,
    DecodeError,
    EncodeError,
    InvalidRecord,
    SchemaNotFound,
    UnknownSchema,
)
from reach.records import (
    AgentRegistration,
    AgentState,
    AvroRecord,
    BreakerState,
    Canary,
    CandidateScore,
    Capability,
    CapabilityMode,
    Control,
    ControlKind,
    DeadLetter,
    Decision,
    Envelope,
    ErrorInfo,
    InstanceAction,
    InstanceHealth,
    InstanceOverride,
    LoadReport,
    Policy,
    Receipt,
    RoutingHints,
    Status,
    StepStatus,
    Weights,
)

NAMES = ["Envelope", "Receipt", "AgentRegistration", "DeadLetter", "Control", "LoadReport", "InstanceHealth",
         "App"]
NOW = 1_714_564_800_123


def _envelope(**changes: Any) -> Envelope:
    base = Envelope(
        message_id="01HWZ3J1R8Q6X8V1N0M2K4T5B7",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        tenant="acme",
        source="agent://upstream/web",
        capability="contract.analysis",
        payload=b'{"doc": "s3://bucket/contract.pdf"}',
        created_at=NOW,
        deadline=NOW + 60_000,
        delivery_timeout_ms=5_000,
        execution_timeout_ms=30_000,
    )
    return base.model_copy(update=changes)


def _samples() -> list[AvroRecord]:
    """A minimal and a fully populated instance of every record (Control once per kind)."""
    error = ErrorInfo(kind="OVERLOAD", code="all-busy", message="every candidate is above 80% load")
    full_envelope = _envelope(
        parent_id="01HWZ3J1R8Q6X8V1N0M2K4T5B6",
        capability_version=">=1.2 <2",
        intent="summarise",
        to_agent="agent://legal/reader",
        content_type="application/vnd.acme+json",
        schema_version="3",
        routing=RoutingHints(
            region="eu-west-1", session_key="s-42", tags=["gpu", "eu"], priority=5, canary=True
        ),
        expire_at=NOW + 3_600_000,
        attempt=3,
        max_attempts=5,
        generation=2,
        reroutes=1,
        excluded_instances=["i-1", "i-2"],
        idempotency_key="order-77",
        reply_to="reach.replies.cli-1",
        callback="https://example.test/hook",
        headers={"traceparent": "00-4bf9-01", "x": ""},
    )
    decision = Decision(
        candidates=[
            CandidateScore(
                instance_id="i-3",
                agent_id="agent://legal/reader",
                score=0.91,
                fit=1.0,
                locality=1.0,
                load=0.7,
                affinity=0.0,
            )
        ],
        picked_instance="i-3",
        topic="reach.agent.legal.reader",
        partition=2,
        offset=12345678901,
        weights={"fit": 0.4, "locality": 0.2, "load": 0.3, "affinity": 0.1},
    )
    receipt = dict(message_id="m", trace_id="t", tenant="acme", capability="contract.analysis", at=NOW)
    registration = dict(
        agent_id="agent://legal/reader",
        instance_id="i-3",
        build_version="1.4.2",
        heartbeat_at=NOW,
        ttl_ms=15_000,
        inbox_topic="reach.agent.legal.reader",
    )
    dead = dict(
        envelope=b"\xc3\x01garbage",
        reason="UNDECODABLE",
        first_failure_at=NOW,
        last_failure_at=NOW + 5,
        origin_topic="reach.cap.contract.analysis",
        origin_partition=7,
        origin_offset=2**40,
    )
    return [
        _envelope(),
        full_envelope,
        Receipt(**receipt, status=Status.ACCEPTED),
        Receipt(
            **receipt,
            generation=1,
            agent_id="agent://legal/reader",
            instance_id="i-3",
            status=Status.FAILED,
            attempt=2,
            error=error,
            retry_after_ms=2_000,
            result=b"\x00\x01",
            step_status=StepStatus.ERROR,
            timings={"queue_ms": 3, "handler_ms": 250},
            decision=decision,
            cost=0.0042,
            due_at=NOW + 1_000,
        ),
        AgentRegistration(**registration, state=AgentState.STARTING),
        AgentRegistration(
            **registration,
            capabilities=[
                Capability(
                    name="contract.analysis",
                    version="1.4.0",
                    input_schema='{"type": "object"}',
                    output_schema='{"type": "object"}',
                    mode=CapabilityMode.SUBSCRIBE,
                    tags=["pdf"],
                    examples=['{"doc": "a"}'],
                )
            ],
            tenants=["acme"],
            region="eu-west-1",
            weight=2.5,
            max_concurrency=8,
            max_queue=32,
            qps_limit=50.0,
            cost=0.01,
            state=AgentState.READY,
            inflight=3,
            assigned_partitions=[0, 5],
        ),
        DeadLetter(**dead),
        DeadLetter(
            **dead, error=error, attempts=4, generation=1, message_id="m", capability="c", agent_id="a"
        ),
        Control(kind=ControlKind.WEIGHTS, weights=Weights(fit=0.7), updated_at=NOW, updated_by="ops@acme"),
        Control(
            kind=ControlKind.INSTANCE,
            scope="contract.analysis",
            instance=InstanceOverride(instance_id="i-3", action=InstanceAction.DRAIN),
            updated_at=NOW,
            updated_by="ops",
        ),
        Control(
            kind=ControlKind.POLICY,
            policy=Policy(max_attempts=6, backoff_base_ms=100, budget_ms=90_000, validate_at_router=True, handoff=True),
            updated_at=NOW,
            updated_by="ops",
        ),
        LoadReport(instance_id="i-3", agent_id="agent://legal/reader", at=NOW, inflight=0, capacity=8, max_queue=32),
        LoadReport(instance_id="i-3", agent_id="agent://legal/reader", at=NOW, inflight=8, queued=3, capacity=8,
                   max_queue=20, drain_rate=41.5),
        Control(kind=ControlKind.WEIGHTS, weights=Weights(factors={"health": 0.3, "fit": 0.4}), updated_at=NOW,
                updated_by="ops"),
        Control(kind=ControlKind.CANARY, scope="agent://demo/echo",
                canary=Canary(agent_id="agent://demo/echo", version="1.3.0", started_at=NOW, step_started_at=NOW),
                updated_at=NOW, updated_by="ops"),
        InstanceHealth(instance_id="i-3", agent_id="agent://legal/reader", at=NOW),
        InstanceHealth(instance_id="i-3", agent_id="agent://legal/reader", build_version="1.3.0", at=NOW,
                       breaker=BreakerState.OPEN, open_until=NOW + 30_000, admit=0.1, weight=0.0, timeout_factor=2.0,
                       reason="error rate 0.9 over 12 calls", calls_1m=12, success_1m=0.1, calls_5m=40,
                       success_5m=0.5, p50_ms=12.5, p95_ms=80.0, slow_ratio=0.2, overloads_10s=1,
                       consecutive_failures=7),
    ]


SAMPLES = _samples()


def _id(record: AvroRecord) -> str:
    return f"{record.avro_name}-{len(record.model_fields_set)}"


def _crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO exactly as the Avro specification writes it, independent of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def _avsc(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_ROOT / f"{name}.avsc").read_text())


# --- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("record", SAMPLES, ids=_id)
def test_round_trip(record: AvroRecord) -> None:
    data = codec.encode(record)
    assert codec.decode(data, type(record)) == record
    assert codec.decode_dict(record.avro_name, data) == record.to_avro()
    assert codec.encode_dict(record.avro_name, record.to_avro()) == data


def test_encode_dict_fills_schema_defaults() -> None:
    minimal = _envelope().to_avro()
    for name in ("parent_id", "routing", "attempt", "headers", "excluded_instances", "capability_version"):
        del minimal[name]
    assert codec.decode(codec.encode_dict("Envelope", minimal), Envelope) == _envelope()


@pytest.mark.parametrize("record", SAMPLES, ids=_id)
def test_plain_fastavro_reads_what_the_codec_wrote(record: AvroRecord) -> None:
    data = codec.encode(record)
    schema = _avsc(record.avro_name)
    canonical = to_parsing_canonical_form(schema).encode()
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == _crc64_avro(canonical).to_bytes(8, "little")
    # Plain fastavro honours logicalType, so timestamps come back as datetimes; from_avro accepts them.
    plain = fastavro.schemaless_reader(BytesIO(data[10:]), fastavro.parse_schema(schema, named_schemas={}))
    assert type(record).from_avro(plain) == record


def test_fingerprint_matches_the_avro_test_vector() -> None:
    # From the Avro specification's test data: "int" -> 8247732601305521295.
    assert codec.fingerprint("int") == (8247732601305521295).to_bytes(8, "little")


# --- bad bytes ---------------------------------------------------------------------------------


def _bad_inputs() -> list[tuple[str, bytes, type[DecodeError]]]:
    good = codec.encode(_envelope())
    receipt = codec.encode(SAMPLES[2])
    return [
        ("empty", b"", BadFraming),
        ("short header", good[:6], BadFraming),
        ("wrong marker", b"\xc3\x02" + good[2:], BadFraming),
        ("confluent framing", b"\x00\x00\x00\x00\x01" + good[10:], BadFraming),
        ("json", b'{"message_id": "m"}', BadFraming),
        ("unknown fingerprint", MARKER + b"\x00" * 8 + good[10:], UnknownSchema),
        ("another record", receipt, UnknownSchema),
        ("header only", good[:10], CorruptBody),
        ("truncated body", good[:-5], CorruptBody),
        ("trailing bytes", good + b"\x00", CorruptBody),
        ("bad union index", good[:10] + b"\x02m" + b"\x02t" + b"\x0a" + good[15:], CorruptBody),
    ]


@pytest.mark.parametrize(("case", "data", "error"), _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_bytes_raise_typed_errors_carrying_the_raw_bytes(
    case: str, data: bytes, error: type[DecodeError]
) -> None:
    with pytest.raises(error) as caught:
        codec.decode_dict("Envelope", data)
    assert isinstance(caught.value, ReachError)
    assert caught.value.raw == data
    if error is not BadFraming:
        assert caught.value.fingerprint == data[2:10]


def test_valid_avro_that_breaks_a_model_rule_is_a_typed_decode_error() -> None:
    # Any writer can produce this (not only Reach's models): a WEIGHTS record whose weights are null.
    body = codec.encode_dict("Control", {"kind": "WEIGHTS", "weights": None, "updated_at": NOW, "updated_by": "x"})
    assert codec.decode_dict("Control", body)["weights"] is None
    for reader in (codec.default_codec(), ConfluentCodec("mock://reach-invalid")):
        with pytest.raises(InvalidRecord, match="needs its `weights` field") as caught:
            reader.decode(body, Control)
        assert caught.value.raw == body and caught.value.fingerprint == body[2:10]


def test_unknown_schema_names_the_record_it_really_is() -> None:
    with pytest.raises(UnknownSchema, match="it is a Receipt, not a Envelope"):
        codec.decode(codec.encode(SAMPLES[2]), Envelope)


def test_encode_rejects_a_record_that_does_not_fit() -> None:
    record = _envelope().to_avro()
    del record["tenant"]
    with pytest.raises(EncodeError, match="Envelope"):
        codec.encode_dict("Envelope", record)
    with pytest.raises(EncodeError):
        codec.encode_dict("Envelope", {**_envelope().to_avro(), "attempt": "three"})


def test_unknown_record_name_and_lazy_loading(tmp_path: Path) -> None:
    missing = Codec(tmp_path / "nowhere")  # no I/O until first use
    with pytest.raises(SchemaNotFound, match="nowhere"):
        missing.decode_dict("Envelope", b"")
    with pytest.raises(SchemaNotFound, match="Nope"):
        codec.encode_dict("Nope", {})


# --- evolution ---------------------------------------------------------------------------------


def _history(root: Path, name: str) -> list[dict[str, Any]]:
    releases = sorted((root / "history" / name).glob("*.avsc"), key=lambda p: int(p.stem))  # 10 after 9
    return [json.loads(p.read_text()) for p in releases]


@pytest.mark.parametrize("name", NAMES)
def test_current_schema_is_released_in_history(name: str) -> None:
    released = {codec.fingerprint(s) for s in _history(SCHEMA_ROOT, name)}
    assert released, f"schemas/avro/history/{name}/ holds no released version"
    assert codec.default_codec().fingerprint(name) in released, (
        f"{name}.avsc changed since its last release: copy it to history/{name}/<next>.avsc"
    )


def _envelope_v0() -> dict[str, Any]:
    """An older Envelope: no `callback`, no `reroutes`, no `routing.canary` (all defaulted now)."""
    schema = _avsc("Envelope")
    schema["fields"] = [f for f in schema["fields"] if f["name"] not in ("callback", "reroutes", "session_snapshot")]
    routing = next(f for f in schema["fields"] if f["name"] == "routing")
    routing["type"]["fields"] = [f for f in routing["type"]["fields"] if f["name"] != "canary"]
    del routing["default"]["canary"]
    return schema


@pytest.fixture
def root_with_v0(tmp_path: Path) -> Path:
    shutil.copytree(SCHEMA_ROOT, tmp_path, dirs_exist_ok=True)
    (tmp_path / "history" / "Envelope" / "0.avsc").write_text(json.dumps(_envelope_v0()))
    return tmp_path


def test_an_older_writer_still_decodes(root_with_v0: Path) -> None:
    v0 = _envelope_v0()
    body = _envelope(reroutes=0).to_avro()
    for name in ("callback", "reroutes", "session_snapshot"):
        del body[name]
    del body["routing"]["canary"]
    buf = BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v0, named_schemas={}), body)
    data = MARKER + codec.fingerprint(v0) + buf.getvalue()

    old_aware = Codec(root_with_v0)
    assert old_aware.known_fingerprints("Envelope") == {
        codec.fingerprint(v0),
        *(codec.fingerprint(s) for s in _history(SCHEMA_ROOT, "Envelope")),
    }
    assert old_aware.decode(data, Envelope) == _envelope()
    with pytest.raises(UnknownSchema):
        codec.decode(data, Envelope)  # the project's history does not hold this made-up v0


def test_a_state_from_a_newer_writer_reads_as_offline(tmp_path: Path) -> None:
    newer = _avsc("AgentRegistration")
    state = next(f for f in newer["fields"] if f["name"] == "state")
    state["type"]["symbols"].append("PAUSED")
    shutil.copytree(SCHEMA_ROOT, tmp_path, dirs_exist_ok=True)
    (tmp_path / "history" / "AgentRegistration" / "99.avsc").write_text(json.dumps(newer))
    buf = BytesIO(MARKER + codec.fingerprint(newer))
    buf.seek(0, 2)
    fastavro.schemaless_writer(
        buf, fastavro.parse_schema(newer, named_schemas={}), {**SAMPLES[4].to_avro(), "state": "PAUSED"}
    )
    assert Codec(tmp_path).decode(buf.getvalue(), AgentRegistration).state is AgentState.OFFLINE


def test_a_capability_mode_from_a_newer_writer_reads_as_handle(tmp_path: Path) -> None:
    newer = _avsc("AgentRegistration")
    caps = next(f for f in newer["fields"] if f["name"] == "capabilities")
    mode = next(f for f in caps["type"]["items"]["fields"] if f["name"] == "mode")
    mode["type"]["symbols"].append("stream")
    shutil.copytree(SCHEMA_ROOT, tmp_path, dirs_exist_ok=True)
    (tmp_path / "history" / "AgentRegistration" / "99.avsc").write_text(json.dumps(newer))
    record = SAMPLES[5].to_avro()
    record["capabilities"] = [{**record["capabilities"][0], "mode": "stream"}]
    buf = BytesIO(MARKER + codec.fingerprint(newer))
    buf.seek(0, 2)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(newer, named_schemas={}), record)
    decoded = Codec(tmp_path).decode(buf.getvalue(), AgentRegistration)
    assert decoded.capabilities[0].mode is CapabilityMode.HANDLE


def test_a_registration_from_before_max_queue_reads_with_no_queue() -> None:
    v1 = json.loads((SCHEMA_ROOT / "history" / "AgentRegistration" / "1.avsc").read_text())
    body = {k: v for k, v in SAMPLES[5].to_avro().items() if k != "max_queue"}
    buf = BytesIO(MARKER + codec.fingerprint(v1))
    buf.seek(0, 2)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v1, named_schemas={}), body)
    assert codec.decode(buf.getvalue(), AgentRegistration).max_queue == 0


def _covering_data(schema: dict[str, Any]) -> list[Any]:
    """Datums that together take every union branch and every enum symbol of `schema` at least once."""
    named: dict[str, Any] = {}

    def width(node: Any) -> int:
        if isinstance(node, str):
            return width(named[node]) if node in named else 1
        if isinstance(node, list):
            return max(len(node), *(width(b) for b in node))
        kind = node["type"]
        if kind == "record":
            named[node["name"]] = node
            return max([1, *(width(f["type"]) for f in node["fields"])])
        if kind == "enum":
            named[node["name"]] = node
            return len(node["symbols"])
        if kind in ("array", "map"):
            return width(node["items" if kind == "array" else "values"])
        return 1

    def datum(node: Any, k: int) -> Any:
        if isinstance(node, str):
            if node in named:
                return datum(named[node], k)
            return {
                "null": None,
                "boolean": bool(k % 2),
                "int": k,
                "long": 2**40 + k,
                "float": 0.5,
                "double": k / 3,
                "bytes": bytes([k]),
                "string": f"s{k}",
            }[node]
        if isinstance(node, list):
            return datum(node[k % len(node)], k)
        kind = node["type"]
        if kind == "record":
            return {f["name"]: datum(f["type"], k) for f in node["fields"]}
        if kind == "enum":
            return node["symbols"][k % len(node["symbols"])]
        if kind == "array":
            return [datum(node["items"], k)]
        if kind == "map":
            return {"k": datum(node["values"], k)}
        return datum(kind, k)

    return [datum(schema, k) for k in range(width(schema))]


def _enums(schema: Any) -> dict[str, dict[str, Any]]:
    """Every enum a schema defines, by name."""
    if isinstance(schema, list):
        return {k: v for branch in schema for k, v in _enums(branch).items()}
    if not isinstance(schema, dict):
        return {}
    found = {schema["name"]: schema} if schema.get("type") == "enum" else {}
    for child in (schema.get("type"), schema.get("items"), schema.get("values"), *schema.get("fields", [])):
        found.update(_enums(child))
    return found


def _writable_for(writer: dict[str, Any], older_reader: dict[str, Any]) -> dict[str, Any]:
    """`writer` with each enum cut to the symbols an older reader knows where its enum has no default.

    Only releases from before enum defaults lack them (test_every_enum_has_a_default keeps it so):
    such a reader cannot know a symbol added after it, which is why defaults came first."""
    strict = {name: set(e["symbols"]) for name, e in _enums(older_reader).items() if "default" not in e}

    def cut(node: Any) -> Any:
        if isinstance(node, list):
            return [cut(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: cut(v) for k, v in node.items()}
        if node.get("type") == "enum" and node["name"] in strict:
            out["symbols"] = [s for s in node["symbols"] if s in strict[node["name"]]]
        return out

    return cast(dict[str, Any], cut(writer))


def _assert_full_transitive(versions: list[dict[str, Any]]) -> None:
    """Every version reads data written by every other version, in both directions; `versions` are in
    release order, and a pre-defaults release reads a later writer's data in the symbols it knows."""
    for (w, writer), (r, reader) in itertools.permutations(enumerate(versions), 2):
        parsed_writer = fastavro.parse_schema(writer, named_schemas={})
        parsed_reader = fastavro.parse_schema(reader, named_schemas={})
        for datum in _covering_data(_writable_for(writer, reader) if r < w else writer):
            buf = BytesIO()
            fastavro.schemaless_writer(buf, parsed_writer, datum)
            buf.seek(0)
            read = fastavro.schemaless_reader(buf, parsed_writer, parsed_reader)
            assert set(read) == {f["name"] for f in reader["fields"]}


@pytest.mark.parametrize("name", NAMES)
def test_full_transitive_compatibility(name: str) -> None:
    _assert_full_transitive([*_history(SCHEMA_ROOT, name), _avsc(name)])


def test_full_transitive_compatibility_with_an_older_version(root_with_v0: Path) -> None:
    _assert_full_transitive([*_history(root_with_v0, "Envelope"), _avsc("Envelope")])


def test_a_symbol_added_after_the_defaults_release_stays_full_transitive() -> None:
    # What the next release does (docs/records.md): one new symbol, nothing else.
    future = _avsc("Receipt")
    status = next(f for f in future["fields"] if f["name"] == "status")
    status["type"]["symbols"].append("PAUSED")
    _assert_full_transitive([*_history(SCHEMA_ROOT, "Receipt"), _avsc("Receipt"), future])


@pytest.mark.parametrize("name", NAMES)
def test_every_enum_has_a_default(name: str) -> None:
    # Without a default, a reader fails on the first symbol added after it (docs/records.md).
    missing = [e for e, schema in _enums(_avsc(name)).items() if schema.get("default") not in schema["symbols"]]
    assert not missing, f"{name}.avsc: enums without a default: {missing}"


def test_the_compatibility_check_catches_breaking_changes() -> None:
    current = _avsc("Receipt")
    new_required = json.loads(json.dumps(current))
    new_required["fields"].append({"name": "region", "type": "string"})
    fewer_symbols = json.loads(json.dumps(current))
    status = next(f for f in fewer_symbols["fields"] if f["name"] == "status")
    status["type"]["symbols"].remove("EXPIRED")
    del status["type"]["default"]  # with its default, an old reader reads EXPIRED as UNKNOWN
    for broken in (new_required, fewer_symbols):
        with pytest.raises(fastavro.read.SchemaResolutionError):
            _assert_full_transitive([current, broken])


# --- Confluent Schema Registry framing -------------------------------------------------------


@pytest.mark.parametrize("record", SAMPLES, ids=_id)
def test_confluent_mock_registry_round_trip(record: AvroRecord) -> None:
    registry = ConfluentCodec("mock://reach-test")
    data = registry.encode(record, topic="reach.cap.contract.analysis")
    assert data[0] == 0 and data[:2] != MARKER
    assert registry.decode(data, type(record)) == record
    assert registry.decode_dict(record.avro_name, data) == record.to_avro()
    assert registry.decode(codec.encode(record), type(record)) == record  # single-object is accepted too


def test_confluent_errors_are_typed() -> None:
    data = ConfluentCodec("mock://one").encode(_envelope())
    other = ConfluentCodec("mock://two")  # each mock client is its own empty registry
    with pytest.raises(UnknownSchema) as caught:
        other.decode(data, Envelope)
    assert caught.value.raw == data
    with pytest.raises(BadFraming):
        other.decode(b"\x07junk", Envelope)


def test_registry_framing_is_used_when_a_registry_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.envelopes import new_envelope
    from reach.kafka import codec as module
    from reach.records import Envelope

    env = new_envelope("demo.echo", {"x": 1})
    single = module.encode(env)
    monkeypatch.setattr(module, "_wire", None)
    monkeypatch.setattr(module, "_wire_url", None)
    module.use_schema_registry("mock://reach-test")  # what an entry point does with REACH_SCHEMA_REGISTRY_URL
    framed = module.encode(env)
    assert framed[:1] == b"\x00" and framed != single
    assert module.decode(framed, Envelope) == env
    assert module.decode(single, Envelope) == env, "single-object records still decode"
    module.use_schema_registry(None)
    assert module.encode(env) == single, "without a registry named, single-object encoding again"
    monkeypatch.setattr(module, "_wire", None)


def test_the_codec_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.envelopes import new_envelope
    from reach.kafka import codec as module

    env = new_envelope("demo.echo", {"x": 1})
    monkeypatch.setattr(module, "_wire", None)
    monkeypatch.setattr(module, "_wire_url", None)
    monkeypatch.setenv("REACH_SCHEMA_REGISTRY_URL", "mock://reach-test")
    assert module.encode(env)[:1] != b"\x00", "the registry comes from the entry point's settings, not the env"


def test_a_registry_outage_is_transient_not_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from reach.kafka.codec import RegistryUnavailable
    from reach.tooling.local.process import free_port

    data = ConfluentCodec("mock://one").encode(_envelope())
    down = ConfluentCodec(f"http://127.0.0.1:{free_port()}", conf={"max.retries": 0})
    with pytest.raises(RegistryUnavailable, match="did not answer"):
        down.decode(data, Envelope)
    failing = ConfluentCodec("mock://three")

    def unavailable(_name: str) -> Any:
        def deserialize(*_args: Any) -> Any:
            raise SchemaRegistryError(503, 50301, "service unavailable")
        return deserialize

    monkeypatch.setattr(failing, "_deserializer", unavailable)
    with pytest.raises(RegistryUnavailable):
        failing.decode(data, Envelope)
    assert not issubclass(RegistryUnavailable, DecodeError), "the router must not turn it into REJECTED"
