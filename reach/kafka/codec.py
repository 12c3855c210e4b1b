"""Avro single-object encoding of the reach.v1 records; writer schemas are resolved by fingerprint."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from io import BytesIO
from pathlib import Path
from typing import Any, TypeVar, cast

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint as _crc64_hex
from fastavro.schema import to_parsing_canonical_form
from pydantic import ValidationError

from reach.errors import ReachError
from reach.records import AvroRecord, to_epoch_millis

SCHEMA_ROOT = Path(__file__).resolve().parents[2] / "schemas" / "avro"
MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8

R = TypeVar("R", bound=AvroRecord)


class CodecError(ReachError):
    """Root of the codec's errors."""


class SchemaNotFound(CodecError):
    """No usable schema file for a record name: a packaging or programming error, not bad input."""


class EncodeError(CodecError):
    """A record does not fit its schema (missing field, wrong type)."""


class DecodeError(CodecError):
    """Bytes that cannot be read as the expected record; `.raw` holds them for a dead letter."""

    def __init__(self, message: str, *, raw: bytes, fingerprint: bytes | None = None) -> None:
        super().__init__(message)
        self.raw = raw
        self.fingerprint = fingerprint


class BadFraming(DecodeError):
    """The bytes do not start with a known framing header."""


class UnknownSchema(DecodeError):
    """The writer schema's fingerprint matches neither the current schema nor any in history."""


class CorruptBody(DecodeError):
    """The header is fine but the body is truncated, has trailing bytes, or is not valid Avro."""


class InvalidRecord(DecodeError):
    """Valid Avro that breaks a rule of its model (a WEIGHTS control record without weights)."""


class RegistryUnavailable(CodecError):
    """The Schema Registry did not answer (outage, 5xx, throttling): transient, the record itself may be fine.

    Not a DecodeError on purpose: callers treat it as infrastructure (do not commit, back off, read again),
    never as a REJECTED envelope."""


_NETWORK_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3"})


def _transient(exc: BaseException) -> bool:
    """A failure to reach the registry, as opposed to a body that does not decode."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        return status >= 500 or status in (401, 403, 408, 429) or status < 0  # < 0: no HTTP answer at all
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    return any(cls.__module__.split(".")[0] in _NETWORK_PACKAGES for cls in type(exc).__mro__)


@dataclass(frozen=True, slots=True)
class _Version:
    parsed: dict[str, Any]
    resolve_to: dict[str, Any] | None  # None for the current schema: no resolution needed
    fingerprint: bytes
    path: Path


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    raw: dict[str, Any]
    current: _Version
    header: bytes
    versions: dict[bytes, _Version]


def fingerprint(schema: dict[str, Any] | str) -> bytes:
    """The 8-byte little-endian CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form."""
    return bytes.fromhex(_crc64_hex(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def _bad_framing(name: str, raw: bytes) -> BadFraming:
    start = raw[:HEADER_SIZE].hex(" ") or "no bytes"
    return BadFraming(
        f"{name}: expected Avro single-object encoding (C3 01 + 8-byte fingerprint), got {start}; "
        "is the producer using Reach's codec?",
        raw=raw,
    )


def _model(model: type[R], record: dict[str, Any], raw: bytes) -> R:
    try:
        return model.from_avro(record)
    except ValidationError as exc:  # any writer can produce valid Avro, not only Reach's models
        raise InvalidRecord(
            f"{model.avro_name}: decodes but breaks the record's rules: "
            + "; ".join(f"{'.'.join(map(str, e['loc'])) or '(record)'}: {e['msg']}" for e in exc.errors()),
            raw=bytes(raw),
            fingerprint=bytes(raw[2:HEADER_SIZE]) if raw[:2] == MARKER else None,
        ) from exc


def _without_logical_types(node: Any) -> Any:
    # We read and write wire values (int millis), not datetimes: faster, and what the models hold.
    # Parsing Canonical Form ignores logicalType, so fingerprints are unaffected.
    if isinstance(node, dict):
        return {k: _without_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_without_logical_types(v) for v in node]
    return node


def _with_millis(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _with_millis(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_with_millis(v) for v in node]
    return to_epoch_millis(node) if isinstance(node, datetime) else node


class Codec:
    """Encodes with the current schema of a record (or the version it is pinned to, `pin`); decodes any version
    found in the schema root."""

    def __init__(self, root: Path = SCHEMA_ROOT) -> None:
        self._root = root
        self._families: dict[str, _Family] = {}
        self._pins: dict[str, _Version] = {}  # record -> the older version its writers write (reach.kafka.writeas)

    def encode(self, record: AvroRecord) -> bytes:
        """Frame a model as single-object Avro with its current schema."""
        return self.encode_dict(record.avro_name, record.to_avro())

    def decode(self, data: bytes, model: type[R]) -> R:
        """Read framed bytes written with any known version of `model`'s schema."""
        return _model(model, self.decode_dict(model.avro_name, data), data)

    def encode_dict(self, name: str, record: Mapping[str, Any]) -> bytes:
        """Frame a plain dict (timestamps as epoch millis); omitted fields take their schema default."""
        family = self._families.get(name) or self._load(name)
        buf = BytesIO()
        buf.write(family.header)
        try:
            schemaless_writer(buf, family.current.parsed, record)
        except Exception as exc:  # fastavro raises assorted built-ins for a bad datum
            raise EncodeError(f"cannot encode {name}: {exc!r}; check the record against {name}.avsc") from exc
        pinned = self._pins.get(name)
        return buf.getvalue() if pinned is None else self._written_as(name, family, pinned, buf)

    def _written_as(self, name: str, family: _Family, pinned: _Version, buf: BytesIO) -> bytes:
        """The record as the pinned version's reader reads it from today's bytes (Avro resolution: fields it lacks
        dropped, symbols it lacks as its enum's default), written with that version: bytes such a reader decodes."""
        buf.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(buf, family.current.parsed, pinned.parsed)
            out = BytesIO()
            out.write(MARKER + pinned.fingerprint)
            schemaless_writer(out, pinned.parsed, record)
        except Exception as exc:  # a value the older schema cannot express (a symbol its enum lacks, no default)
            raise EncodeError(f"cannot write {name} as {pinned.path.name} (REACH_RECORDS_WRITE_AS): {exc!r}") from exc
        return out.getvalue()

    def pin(self, name: str, version: int | None) -> Path | None:
        """Write `name` with `history/<name>/<version>.avsc` from now on (None: with the current schema again);
        the file pinned, None when that version is the current schema (nothing to pin). SchemaNotFound for a
        version that is not released."""
        family = self._families.get(name) or self._load(name)
        if version is None:
            self._pins.pop(name, None)
            return None
        path = self._root / "history" / name / f"{version}.avsc"
        if not path.is_file():
            released = sorted(int(p.stem) for p in path.parent.glob("*.avsc") if p.stem.isdigit())
            raise SchemaNotFound(f"{name} v{version} is not released (history/{name}/ holds "
                                 f"{', '.join(map(str, released)) or 'none'})")
        target = family.versions[fingerprint(json.loads(path.read_text(encoding="utf-8")))]
        if target.fingerprint == family.current.fingerprint:
            self._pins.pop(name, None)
            return None
        self._pins[name] = _Version(target.parsed, None, target.fingerprint, path)
        return path

    def pinned(self, name: str) -> bool:
        """Whether `name` is written with an older version than its current schema (hand-written encoders of
        today's layout must then leave it to `encode_dict`)."""
        return name in self._pins

    def decode_dict(self, name: str, data: bytes) -> dict[str, Any]:
        """Read framed bytes into a dict shaped by the current schema (timestamps as epoch millis)."""
        family = self._families.get(name) or self._load(name)
        if data[:2] != MARKER or len(data) < HEADER_SIZE:
            raise _bad_framing(name, bytes(data))
        version = family.versions.get(data[2:HEADER_SIZE])
        if version is None:
            raise self._unknown(name, bytes(data))
        buf = BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            record = cast(dict[str, Any], schemaless_reader(buf, version.parsed, version.resolve_to))
        except Exception as exc:  # truncation, bad varints, bad UTF-8, bad union index ...
            raise CorruptBody(
                f"{name}: body does not decode with schema {version.path.name}: {exc!r}",
                raw=bytes(data),
                fingerprint=version.fingerprint,
            ) from exc
        if buf.tell() != len(data):
            raise CorruptBody(
                f"{name}: {len(data) - buf.tell()} trailing bytes after the record; the frame is corrupt",
                raw=bytes(data),
                fingerprint=version.fingerprint,
            )
        return record

    def schema(self, name: str) -> dict[str, Any]:
        """The current schema of `name` as written in its .avsc (logical types included)."""
        return (self._families.get(name) or self._load(name)).raw

    def fingerprint(self, name: str) -> bytes:
        """The fingerprint of the current schema of `name`."""
        return (self._families.get(name) or self._load(name)).current.fingerprint

    def known_fingerprints(self, name: str) -> frozenset[bytes]:
        """Fingerprints of every version of `name` this codec decodes."""
        return frozenset((self._families.get(name) or self._load(name)).versions)

    def _unknown(self, name: str, raw: bytes) -> UnknownSchema:
        fp = raw[2:HEADER_SIZE]
        other = [n for n in self._names() if n != name and fp in self._versions_or_none(n)]
        hint = (
            f"it is a {other[0]}, not a {name}"
            if other
            else f"add the writer's schema to {self._root / 'history' / name}/ or upgrade this reader"
        )
        return UnknownSchema(
            f"{name}: unknown writer schema fingerprint {fp.hex()}; {hint}", raw=raw, fingerprint=fp
        )

    def _versions_or_none(self, name: str) -> dict[bytes, _Version]:
        try:
            return self._load(name).versions
        except SchemaNotFound:  # a broken neighbour must not hide the real error
            return {}

    def _names(self) -> list[str]:
        return sorted(p.stem for p in self._root.glob("*.avsc"))

    def _load(self, name: str) -> _Family:
        family = self._families.get(name)
        if family is not None:
            return family
        path = self._root / f"{name}.avsc"
        if not path.is_file():
            raise SchemaNotFound(
                f"no schema file {path}; known records: {', '.join(self._names()) or 'none'}"
            )
        raw, current = self._read(path, name, resolve_to=None)
        versions = {current.fingerprint: current}
        for old in sorted((self._root / "history" / name).glob("*.avsc")):
            _, version = self._read(old, name, resolve_to=current.parsed)
            versions.setdefault(version.fingerprint, version)
        family = _Family(name, raw, current, MARKER + current.fingerprint, versions)
        self._families[name] = family
        return family

    @staticmethod
    def _read(path: Path, name: str, *, resolve_to: dict[str, Any] | None) -> tuple[dict[str, Any], _Version]:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            parsed = cast(dict[str, Any], parse_schema(_without_logical_types(raw), named_schemas={}))
        except Exception as exc:
            raise SchemaNotFound(f"{path} is not a valid Avro schema: {exc}") from exc
        if raw.get("name") != name:
            raise SchemaNotFound(f"{path} defines record {raw.get('name')!r}, expected {name!r}")
        return raw, _Version(parsed, resolve_to, fingerprint(raw), path)


_default: Codec | None = None


def default_codec() -> Codec:
    """The process-wide codec over the project's schemas/avro, created on first use."""
    global _default
    if _default is None:
        _default = Codec()
    return _default


_wire: Codec | ConfluentCodec | None = None
_wire_url: str | None = None  # what `_wire` was built for


def use_schema_registry(url: str | None) -> None:
    """Write records with Confluent Schema Registry framing at `url` (ReachSettings.schema_registry_url,
    REACH_SCHEMA_REGISTRY_URL), or single-object encoding when None. Each entry point calls it with the settings
    it built; the codec itself reads no environment."""
    global _wire, _wire_url
    if _wire is None or url != _wire_url:
        _wire, _wire_url = (ConfluentCodec(url) if url else default_codec()), url


def wire_codec() -> Codec | ConfluentCodec:
    """What records are written with: the registry's framing once an entry point named one
    (`use_schema_registry`; reads accept both framings), else single-object encoding."""
    global _wire
    if _wire is None:
        _wire = default_codec()
    return _wire


def encode(record: AvroRecord) -> bytes:
    """Frame a model with its current schema (see `wire_codec`)."""
    return wire_codec().encode(record)


def decode(data: bytes, model: type[R]) -> R:
    """Read framed bytes written with any known version of `model`'s schema."""
    return wire_codec().decode(data, model)


def encode_dict(name: str, record: Mapping[str, Any]) -> bytes:
    """Frame a plain dict with the current schema of record `name`."""
    return wire_codec().encode_dict(name, record)


def decode_dict(name: str, data: bytes) -> dict[str, Any]:
    """Read framed bytes of record `name` into a dict (the router's hot path)."""
    return wire_codec().decode_dict(name, data)


def model_of(model: type[R], record: dict[str, Any], raw: bytes) -> R:
    """`model` from a record already decoded from `raw` (e.g. by a reader reach.kafka.avrogen generated); raises
    InvalidRecord, as `decode` does, when the record breaks the model's rules."""
    return _model(model, record, raw)


class ConfluentCodec:
    """Confluent Schema Registry framing (0x00 + 4-byte schema id), for producers already on a registry.

    Subjects follow the record name strategy (`reach.v1.Envelope`), since one record spans many
    topics. Decoding also accepts Reach's own single-object framing, so a topic may carry both.
    """

    def __init__(
        self, url: str, *, codec: Codec | None = None, conf: Mapping[str, Any] | None = None
    ) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._client = SchemaRegistryClient.new_client({**(conf or {}), "url": url})
        self._codec = codec or default_codec()
        self._serializers: dict[str, Any] = {}
        self._deserializers: dict[str, Any] = {}

    def encode(self, record: AvroRecord, *, topic: str = "") -> bytes:
        """Serialize a model with registry framing, registering its current schema if needed."""
        return self.encode_dict(record.avro_name, record.to_avro(), topic=topic)

    def decode(self, data: bytes, model: type[R], *, topic: str = "") -> R:
        """Deserialize registry-framed (or single-object) bytes into `model`."""
        return _model(model, self.decode_dict(model.avro_name, data, topic=topic), data)

    def encode_dict(self, name: str, record: Mapping[str, Any], *, topic: str = "") -> bytes:
        """Serialize a dict with registry framing."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        try:
            out = self._serializer(name)(dict(record), SerializationContext(topic, MessageField.VALUE))
        except Exception as exc:
            raise EncodeError(f"cannot encode {name} for the schema registry: {exc!r}") from exc
        assert out is not None  # only None for a None record
        return bytes(out)

    def decode_dict(self, name: str, data: bytes, *, topic: str = "") -> dict[str, Any]:
        """Deserialize registry-framed or single-object bytes into a dict (timestamps as epoch millis)."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        if data[:2] == MARKER:
            return self._codec.decode_dict(name, data)
        if len(data) < 5 or data[0] != 0:
            raise BadFraming(
                f"{name}: expected Confluent framing (00 + 4-byte schema id) or single-object (C3 01), "
                f"got {bytes(data[:5]).hex(' ') or 'no bytes'}",
                raw=bytes(data),
            )
        try:
            record = self._deserializer(name)(bytes(data), SerializationContext(topic, MessageField.VALUE))
        except Exception as exc:
            if _transient(exc):
                raise RegistryUnavailable(f"{name}: the schema registry did not answer ({exc!r}); "
                                          "the record is retried when it is back") from exc
            if not isinstance(exc, SchemaRegistryError):
                raise CorruptBody(f"{name}: registry-framed body does not decode: {exc!r}", raw=bytes(data)) from exc
            raise UnknownSchema(
                f"{name}: the registry does not know schema id of this record: {exc}", raw=bytes(data)
            ) from exc
        return dict(_with_millis(record))

    def _serializer(self, name: str) -> Any:
        if name not in self._serializers:
            from confluent_kafka.schema_registry import record_subject_name_strategy
            from confluent_kafka.schema_registry.avro import AvroSerializer

            self._serializers[name] = AvroSerializer(
                self._client,
                json.dumps(self._codec.schema(name)),
                conf={"subject.name.strategy": record_subject_name_strategy},
            )
        return self._serializers[name]

    def _deserializer(self, name: str) -> Any:
        if name not in self._deserializers:
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._deserializers[name] = AvroDeserializer(self._client, json.dumps(self._codec.schema(name)))
        return self._deserializers[name]
