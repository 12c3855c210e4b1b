"""The client's registry follower for `schema_version` (reach.contractbook) on the in-memory bus: a namespace
without a registry costs the first envelope no wait, stamps nothing and is not asked again for RETRY_S; a
follower that has read the registry stamps from memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import cast

from reach import contractbook
from reach.client import Client
from reach.contractbook import ContractBook
from reach.gateway.catalog import RegistryCatalog
from reach.names import Names
from reach.records import Capability
from reach.settings import KafkaSettings, ReachSettings

KAFKA = KafkaSettings(bootstrap="memory://contractbook")


def test_no_registry_stamps_nothing_without_waiting_and_is_tried_again_later() -> None:
    with Client(kafka=KAFKA, settings=ReachSettings(namespace="nobook"), follow_control=False) as client:
        started = time.monotonic()
        assert client.envelope("a.b", {"x": 1}).schema_version is None
        assert time.monotonic() - started < contractbook.WAIT_S, "a missing topic is not waited for"
        assert client.contracts is not None and client.contracts.started, "not asked again before RETRY_S"
        assert client.envelope("a.b", {"x": 2}).schema_version is None
    with Client(kafka=KAFKA, settings=ReachSettings(namespace="nobook"), follow_control=False,
                follow_registry=False) as off:
        assert off.contracts is None and off.envelope("a.b", {}).schema_version is None


class Read:
    """A follower that has read the registry, counting how often the live versions are looked up."""

    def __init__(self, versions: Sequence[Capability]) -> None:
        self.ready = threading.Event()
        self.ready.set()
        self.versions_, self.asked = list(versions), 0

    def versions(self, capability: str, tenant: str, now_ms: int) -> Sequence[Capability]:
        self.asked += 1
        return [c for c in self.versions_ if c.name == capability]

    def close(self) -> None:
        pass


def test_a_read_registry_stamps_from_memory_and_is_looked_up_once_a_ttl() -> None:
    book = ContractBook(names=Names("ns"), kafka=KAFKA, ttl_s=60)
    read = Read([Capability(name="a.b", version="1.2.0"), Capability(name="a.b", version="2.0.0")])
    book._catalog = cast(RegistryCatalog, read)
    assert book.version_for("a.b", "^1", "t1", {"x": 1}) == "1.2.0"
    assert book.version_for("a.b", "*", "t1", {"x": 1}) == "2.0.0", "the newest line"
    assert book.version_for("a.b", "^3", "t1", {}) is None, "nothing live in range"
    assert book.version_for("c.d", "*", "t1", {}) is None
    assert read.asked == 2, "one look-up per (capability, tenant) within the TTL"
