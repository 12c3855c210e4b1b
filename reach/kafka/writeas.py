"""Write records as an older release reads them (REACH_RECORDS_WRITE_AS), for rolling upgrades and rollbacks.

The setting names a release (`schemas/avro/releases.json`: what each release reads, record by record) and/or
`Record=version` items, comma-separated: `d08872c`, `Receipt=6,Envelope=3`, `d08872c,Receipt=7`. While it is set,
every writer of the process (each entry point calls `use`) writes each named record with that version of its schema
(`history/<Record>/<v>.avsc`); the records it does not name are written as today. A record is written as that
version's reader reads today's record (Avro resolution, `reach.kafka.codec.Codec.pin`): fields the version lacks are
dropped (they have defaults, so today's readers read those defaults), enum symbols it lacks are written as its enum's
default (what such a reader would read anyway). `check` says what that turns off, and refuses a version whose enum
has no default for a symbol today's writers use (Receipt v1-v2, Control v1): those values could not be written at
all. The operator sets it before a rolling upgrade and clears it once every reader runs the new release
(docs/operations.md "Rolling upgrades", docs/decisions/0048).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reach.errors import ConfigError
from reach.kafka import codec as _codec

log = logging.getLogger("reach.kafka.writeas")

ENV = "REACH_RECORDS_WRITE_AS"
RELEASES_FILE = "releases.json"
_SHORTEST_COMMIT = 7
_applied: str | None = None  # the value `use` last pinned (logged once)


@dataclass(frozen=True, slots=True)
class Pin:
    """One record written with an older version, and what that version cannot carry."""

    record: str
    version: int
    dropped: tuple[str, ...]  # `Type.field` of today's schema the version lacks: written as nothing, read as default
    defaulted: tuple[str, ...]  # `Enum.SYMBOL -> DEFAULT`: symbols the version lacks, written as its default

    def describe(self) -> str:
        lost = [f"fields {', '.join(self.dropped)} dropped"] if self.dropped else []
        lost += [f"symbols {', '.join(self.defaulted)}"] if self.defaulted else []
        return f"{self.record} v{self.version}" + (f" ({'; '.join(lost)})" if lost else " (nothing lost)")


def releases(root: Path = _codec.SCHEMA_ROOT) -> dict[str, dict[str, Any]]:
    """The released versions each release reads, by release commit (`releases.json`)."""
    path = root / RELEASES_FILE
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text(encoding="utf-8"))["releases"])


def parse(spec: str, root: Path = _codec.SCHEMA_ROOT) -> dict[str, int]:
    """`{record: version}` from a setting's value: a release (its commit or a prefix of 7+ characters, or its name)
    and/or `Record=version` items that override it. ConfigError, saying what is expected, for anything else."""
    versions: dict[str, int] = {}
    overrides: dict[str, int] = {}
    known = releases(root)
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        if "=" in item:
            record, _, number = (s.strip() for s in item.partition("="))
            if not number.isdigit() or int(number) < 1:
                raise ConfigError(f"{ENV}: {item!r}: expected Record=<version number>, such as Receipt=6")
            overrides[record] = int(number)
            continue
        matches = [commit for commit, release in known.items()
                   if item == release.get("name") or (len(item) >= _SHORTEST_COMMIT and commit.startswith(item))]
        if len(matches) != 1:
            names = ", ".join(f"{c[:_SHORTEST_COMMIT]} ({r.get('name', '')})" for c, r in known.items()) or "none"
            raise ConfigError(f"{ENV}: {item!r} names no release in {root / RELEASES_FILE} (known: {names}); "
                              "or give versions as Record=<version>, comma-separated")
        versions.update({name: int(v) for name, v in known[matches[0]]["records"].items()})
    return {**versions, **overrides}


def check(versions: Mapping[str, int], root: Path = _codec.SCHEMA_ROOT) -> list[Pin]:
    """What writing each record with its version loses; ConfigError for an unknown record or version, a version
    newer than today's schema, or a symbol today's writers use that the version's enum cannot stand for."""
    names = sorted(p.stem for p in root.glob("*.avsc"))
    pins = []
    for record, version in sorted(versions.items()):
        if record not in names:
            raise ConfigError(f"{ENV}: no record {record!r}; records: {', '.join(names)}")
        path = root / "history" / record / f"{version}.avsc"
        if not path.is_file():
            released = sorted(int(p.stem) for p in path.parent.glob("*.avsc") if p.stem.isdigit())
            raise ConfigError(f"{ENV}: {record} v{version} is not released "
                              f"(history/{record}/ holds {', '.join(map(str, released)) or 'none'})")
        today = json.loads((root / f"{record}.avsc").read_text(encoding="utf-8"))
        older = json.loads(path.read_text(encoding="utf-8"))
        pins.append(_pin(record, version, today, older))
    return pins


def use(spec: str | None, root: Path = _codec.SCHEMA_ROOT) -> list[Pin]:
    """Pin the process's writers to `spec` (ReachSettings.records_write_as), or unpin them when it is None or blank;
    each entry point calls it with the settings it built. Logs what the pins turn off, once."""
    global _applied
    chosen = check(parse(spec, root), root) if spec and spec.strip() else []
    codec = _codec.default_codec()
    for record in sorted(p.stem for p in root.glob("*.avsc")):
        codec.pin(record, None)
    for pin in chosen:
        codec.pin(pin.record, pin.version)
    said, _applied = _applied, spec
    if chosen and spec != said:  # every Client of a process calls it too: said once per value
        log.warning("%s=%s: writing %s; clear it once every reader runs this release", ENV, spec,
                    "; ".join(pin.describe() for pin in chosen))
    return chosen


def _pin(record: str, version: int, today: dict[str, Any], older: dict[str, Any]) -> Pin:
    new, old = dict(_named(today)), dict(_named(older))
    dropped, defaulted = [], []
    for name, node in new.items():
        before = old.get(name)
        if before is None:
            continue  # a type new as a whole: the field holding it is dropped (listed below)
        if node["type"] == "record":
            kept = {f["name"] for f in before["fields"]}
            dropped += [f"{name}.{f['name']}" for f in node["fields"] if f["name"] not in kept]
        elif node["type"] == "enum":
            missing = [s for s in node["symbols"] if s not in before["symbols"]]
            if missing and "default" not in before:
                raise ConfigError(
                    f"{ENV}: {record} v{version} cannot stand for {name} symbols {', '.join(missing)} (its {name} "
                    f"has no default, so its readers fail on them); pin {record} to a later version")
            defaulted += [f"{name}.{s} -> {before['default']}" for s in missing]
    return Pin(record, version, tuple(dropped), tuple(defaulted))


def _named(node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named record and enum type of a schema, by name (the first definition: later uses refer to it)."""
    if isinstance(node, list):
        for branch in node:
            yield from _named(branch)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "enum"):
            yield node["name"], node
        if kind == "record":
            for field in node["fields"]:
                yield from _named(field["type"])
        elif kind == "array":
            yield from _named(node["items"])
        elif kind == "map":
            yield from _named(node["values"])
        elif isinstance(kind, (dict, list)):
            yield from _named(kind)
