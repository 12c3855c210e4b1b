"""The contract versions a sender stamps on its requests (`Envelope.schema_version`, reach.core.contracts), from a
follower of `<ns>.registry` started on a client's first envelope (docs/decisions/0075).

The first envelope waits up to `wait_s` for the registry to be read to its end; from then on the live versions of
a capability are looked up in memory (kept `ttl_s` per capability and tenant, so a send costs no scan of every
registration). A registry that cannot be read (no topic yet, an ACL) leaves `schema_version` empty (nothing is
compared) and is tried again `RETRY_S` later, as the client's control feed is; one read slower than the wait is
followed on in the background.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from reach.core.contracts import contract_version
from reach.envelopes import encode_payload, now_ms
from reach.gateway.catalog import RegistryCatalog
from reach.names import Names
from reach.records import Capability
from reach.settings import KafkaSettings

log = logging.getLogger("reach.client")
WAIT_S = 5.0
RETRY_S = 30.0
TTL_S = 1.0
MOST_KEPT = 1_024


class ContractBook:
    """`version_for` answers from the live registrations; `start` (once, on first use) reads the registry."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, wait_s: float = WAIT_S, ttl_s: float = TTL_S) -> None:
        self._names, self._kafka = names, kafka
        self._wait_s, self._ttl_s = wait_s, ttl_s
        self._catalog: RegistryCatalog | None = None
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, str], tuple[float, Sequence[Capability]]] = {}
        self._retry_at = 0.0

    @property
    def started(self) -> bool:
        """Following the registry, or waiting to try again: no first read is due."""
        return self._catalog is not None or time.monotonic() < self._retry_at

    def start(self) -> None:
        """Follow the registry; wait up to `wait_s` for it to be read. A first read that fails is logged (not
        raised) and tried again RETRY_S later."""
        with self._lock:
            if self.started:
                return
            catalog = RegistryCatalog(names=self._names, kafka=self._kafka)
            self._catalog = catalog
        catalog.begin()
        deadline = time.monotonic() + self._wait_s
        while not catalog.ready.wait(0.02) and catalog.error is None and time.monotonic() < deadline:
            pass
        if catalog.ready.is_set():
            return
        if catalog.error is None:  # slow, not failing: followed on, read once it is
            log.warning("%s was not read within %.0fs; requests carry no schema_version until it is",
                        self._names.registry, self._wait_s)
            return
        log.warning("cannot read %s (%s); requests carry no schema_version (agents do not compare it) for %.0fs",
                    self._names.registry, catalog.error, RETRY_S)
        with self._lock:
            self._catalog, self._retry_at = None, time.monotonic() + RETRY_S
        catalog.close()

    def version_for(self, capability: str, version_range: str, tenant: str, payload: Any) -> str | None:
        """The contract version a request for `capability` `version_range` of `tenant` is checked against, or None
        (no live version in the range, or the registry not read yet)."""
        if not self.started:
            self.start()
        catalog = self._catalog
        if catalog is None or not catalog.ready.is_set():
            return None
        now = time.monotonic()
        kept = self._kept.get((capability, tenant))
        if kept is None or kept[0] <= now:
            if len(self._kept) >= MOST_KEPT:
                self._kept.clear()
            kept = (now + self._ttl_s, catalog.versions(capability, tenant, now_ms()))
            self._kept[(capability, tenant)] = kept
        content_type = "application/octet-stream" if isinstance(payload, (bytes, bytearray)) else "application/json"
        return contract_version(kept[1], version_range, lambda: encode_payload(payload)[0], content_type)

    def close(self) -> None:
        with self._lock:
            catalog, self._catalog = self._catalog, None
        if catalog is not None:
            catalog.close()
