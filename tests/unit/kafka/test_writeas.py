"""REACH_RECORDS_WRITE_AS (reach.kafka.writeas): records written as an older release reads them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pytest

from reach.envelopes import new_envelope
from reach.errors import ConfigError
from reach.kafka import codec as codec_module
from reach.kafka import receiptbytes, writeas
from reach.kafka.codec import HEADER_SIZE, MARKER, SCHEMA_ROOT, Codec, UnknownSchema, fingerprint
from reach.receipts import receipt_for, started_bytes
from reach.records import Envelope, Receipt, Status
from reach.streams.router.routed_receipt import RoutedReceiptWriter
from tests.unit.kafka.test_codec import _covering_data

ROOT = SCHEMA_ROOT.parents[1]
NAMES = sorted(p.stem for p in SCHEMA_ROOT.glob("*.avsc"))
HISTORY = [(name, int(p.stem)) for name in NAMES
           for p in sorted((SCHEMA_ROOT / "history" / name).glob("*.avsc"), key=lambda p: int(p.stem))]
PREVIOUS = "d08872c4305bc8f22c9eee4f58ce92d255f98583"


def _schema(name: str, version: int | None = None) -> dict[str, Any]:
    path = SCHEMA_ROOT / (f"{name}.avsc" if version is None else f"history/{name}/{version}.avsc")
    return dict(json.loads(path.read_text()))


def _parsed(schema: dict[str, Any]) -> Any:
    return fastavro.parse_schema(codec_module._without_logical_types(schema), named_schemas={})  # noqa: SLF001


def _reader_of(name: str, version: int, tmp: Path) -> Codec:
    """The decoder a release whose newest `name` is `version` had: that version current, the ones before it history."""
    root = tmp / f"{name}-{version}"
    (root / "history" / name).mkdir(parents=True)
    shutil.copy(SCHEMA_ROOT / "history" / name / f"{version}.avsc", root / f"{name}.avsc")
    for older in range(1, version):
        shutil.copy(SCHEMA_ROOT / "history" / name / f"{older}.avsc", root / "history" / name / f"{older}.avsc")
    return Codec(root)


@pytest.fixture(autouse=True)
def _unpinned() -> Iterator[None]:
    yield
    writeas.use(None)


@pytest.mark.parametrize(("name", "version"), HISTORY)
def test_a_record_pinned_to_a_released_version_is_what_that_versions_reader_reads(
        name: str, version: int, tmp_path: Path) -> None:
    """Each record pinned to each historical version: that version's reader decodes it, and reads what it would
    have read from today's bytes (fields it lacks dropped, symbols it lacks as its default); today's reader too.
    A version whose enum has no default for a symbol today writes is refused instead, at start."""
    today, older = _schema(name), _schema(name, version)
    try:
        [pin] = writeas.check({name: version})
    except ConfigError as exc:
        assert "has no default" in str(exc) and f"{name} v{version}" in str(exc)
        assert any("default" not in e for e in _enums(older).values()), "refused only for enums without defaults"
        return
    pinned, current, reader = Codec(), Codec(), _reader_of(name, version, tmp_path)
    pinned.pin(name, version)
    for datum in _covering_data(today):
        data = pinned.encode_dict(name, datum)
        assert data[2:HEADER_SIZE] == fingerprint(older), "framed with the pinned version's fingerprint"
        buf = BytesIO(current.encode_dict(name, datum)[HEADER_SIZE:])
        expected = fastavro.schemaless_reader(buf, _parsed(today), _parsed(older))  # an old reader of today's bytes
        assert reader.decode_dict(name, data) == expected
        assert current.decode_dict(name, data) == current.decode_dict(name, pinned.encode_dict(name, expected))
    assert pin.record == name and pin.version == version


def _enums(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: node for n, node in writeas._named(schema) if node["type"] == "enum"}  # noqa: SLF001


def test_a_version_without_enum_defaults_is_refused_at_start_with_what_to_do() -> None:
    with pytest.raises(ConfigError, match=r"Receipt v1 cannot stand for ReceiptStatus symbols .*pin Receipt to a"):
        writeas.use("Receipt=1")


def test_a_release_names_each_records_version_and_items_override_it() -> None:
    release = writeas.parse(PREVIOUS[:7])
    assert release == writeas.parse("2026-12-02") == writeas.parse(PREVIOUS)
    assert release["Receipt"] == 6 and release["Envelope"] == 3 and "AuditEvent" not in release
    assert writeas.parse(f"{PREVIOUS[:7]}, Receipt=7")["Receipt"] == 7
    assert writeas.parse("Envelope=2") == {"Envelope": 2}


@pytest.mark.parametrize(("spec", "says"), [
    ("0000000", "names no release"), ("Receipt=x", "expected Record=<version number>"),
    ("Receipt=0", "expected Record=<version number>"), ("Receept=3", "no record 'Receept'"),
    ("Receipt=99", "Receipt v99 is not released"),
])
def test_a_bad_value_is_refused_saying_what_is_expected(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        writeas.use(spec)


def test_the_start_up_report_says_what_the_release_cannot_carry() -> None:
    pins = {pin.record: pin for pin in writeas.use(PREVIOUS[:7])}
    assert "Envelope.max_tokens" in pins["Envelope"].dropped
    assert "ReceiptStatus.INPUT_REQUIRED -> UNKNOWN" in pins["Receipt"].defaulted
    assert pins["LoadReport"].describe() == "LoadReport v1 (nothing lost)"


@pytest.mark.parametrize("commit", sorted(writeas.releases()))
def test_each_release_lists_the_newest_version_it_reads(commit: str) -> None:
    """Against the release's own schemas, when its commit is in this clone: each listed version is one its decoder
    knows, no later released version is, and every record it reads is listed."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit, "schemas/avro"],
                           capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip(f"release {commit[:7]} is not in this clone's history")
    known: dict[str, set[bytes]] = {}
    for path in files.stdout.split():
        if path.endswith(".avsc"):
            raw = json.loads(subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
                                            capture_output=True, text=True, check=True).stdout)
            known.setdefault(raw["name"], set()).add(fingerprint(raw))
    listed = writeas.releases()[commit]["records"]
    assert sorted(listed) == sorted(known)
    for name, version in listed.items():
        reads = [v for n, v in HISTORY if n == name and fingerprint(_schema(name, v)) in known[name]]
        assert reads and max(reads) == version, f"{name}: the release reads {reads}, listed {version}"


def test_the_previous_releases_decoder_reads_what_a_pinned_writer_writes(tmp_path: Path) -> None:
    """Without the pin its decoder meets today's Envelope as an unknown schema (the rollback of issue 28)."""
    envelope = new_envelope("demo.echo", {"n": 1}, max_tokens=100)
    old = _reader_of("Envelope", 3, tmp_path)
    with pytest.raises(UnknownSchema):
        old.decode(codec_module.encode(envelope), Envelope)
    writeas.use(PREVIOUS[:7])
    read = old.decode_dict("Envelope", codec_module.encode(envelope))
    assert read["message_id"] == envelope.message_id and "max_tokens" not in read


def test_the_fast_receipt_encoders_leave_pinned_receipts_to_the_codec(tmp_path: Path) -> None:
    envelope = new_envelope("demo.echo", {"n": 1})
    assert receiptbytes.flat_writer() is not None and RoutedReceiptWriter.create() is not None
    writeas.use("Receipt=6")
    assert receiptbytes.flat_writer() is None and RoutedReceiptWriter.create() is None
    v6 = fingerprint(_schema("Receipt", 6))
    started = started_bytes(envelope, agent_id="agent://demo/echo", instance_id="i1")
    done = receiptbytes.encode_receipt(receipt_for(envelope, Status.COMPLETED, agent_id="agent://demo/echo",
                                                   instance_id="i1", result=b'"ok"'))
    assert started[:HEADER_SIZE] == done[:HEADER_SIZE] == MARKER + v6
    old = _reader_of("Receipt", 6, tmp_path)
    assert old.decode_dict("Receipt", done)["status"] == "COMPLETED"
    assert codec_module.decode(started, Receipt).status is Status.STARTED
    writeas.use(None)
    assert receiptbytes.flat_writer() is not None, "unpinned: the fast path again"
