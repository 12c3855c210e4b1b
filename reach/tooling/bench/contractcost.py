"""What a request's contract version and content key cost per request (docs/decisions/0075), on one core, no bus:
`python -m reach.tooling.bench.contractcost` prints the best of three `timeit` runs of each call, in µs.

The agent's comparison (`reach.agent.declared.contract_problem`) with and without a `schema_version`, the content
key of a request to an idempotent capability with no key (`request_key`), the version an intake stamps
(`reach.core.contracts.contract_version`) with one and with two live versions in the request's range, and
`Client.envelope` without and with the stamp (its registry follower replaced by one already read, holding one
live version: what every envelope after the first costs).
"""

from __future__ import annotations

import json
import threading
import timeit
from collections.abc import Callable, Sequence
from typing import Any, cast

from reach.agent import Agent
from reach.agent.declared import contract_problem, request_key
from reach.client import Client
from reach.contractbook import ContractBook
from reach.core.contracts import contract_version
from reach.envelopes import new_envelope
from reach.gateway.catalog import RegistryCatalog
from reach.names import Names
from reach.records import Capability
from reach.settings import KafkaSettings, ReachSettings

PAYLOAD = {"q": "x" * 200, "k": list(range(20)), "nested": {"a": 1, "b": "two"}}


def best_us(call: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=3)) / number * 1e6


class ReadCatalog:
    """A registry follower that has read the registry: one live version of `bench.contract`."""

    def __init__(self, versions: Sequence[Capability]) -> None:
        self.ready = threading.Event()
        self.ready.set()
        self._versions = versions

    def versions(self, capability: str, tenant: str, now_ms: int) -> Sequence[Capability]:
        return self._versions

    def close(self) -> None:
        pass


def client_rows(one: Sequence[Capability]) -> list[tuple[str, float]]:
    kafka, settings = KafkaSettings(bootstrap="memory://contractcost"), ReachSettings(namespace="bench")
    plain = Client(kafka=kafka, settings=settings, follow_control=False, follow_registry=False)
    stamping = Client(kafka=kafka, settings=settings, follow_control=False)
    book = ContractBook(names=Names("bench"), kafka=kafka)
    book._catalog = cast(RegistryCatalog, ReadCatalog(one))
    stamping.contracts = book
    assert stamping.envelope("bench.contract", PAYLOAD).schema_version == "1.2.0"
    out: list[tuple[str, Any]] = [
        ("sdk: Client.envelope, follow_registry=False", best_us(lambda: plain.envelope("bench.contract", PAYLOAD),
                                                                50_000)),
        ("sdk: Client.envelope, stamped", best_us(lambda: stamping.envelope("bench.contract", PAYLOAD), 50_000)),
    ]
    plain.close()
    stamping.close()
    return out


def rows() -> list[tuple[str, float]]:
    agent = Agent("agent://bench/contracts", instance_id="bench")
    agent.capability("bench.contract", version="1.2.0", idempotent=True)(lambda p: p)
    spec = agent.capabilities["bench.contract"]
    bare = new_envelope("bench.contract", PAYLOAD)
    stamped = new_envelope("bench.contract", PAYLOAD, schema_version="1.2.0")
    one = [Capability(name="bench.contract", version="1.2.0")]
    two = [*one, Capability(name="bench.contract", version="1.3.0", input_schema='{"type": "object"}')]

    def body() -> bytes:
        return json.dumps(PAYLOAD).encode()

    size = len(bare.payload)
    return [
        ("agent: contract_problem, no schema_version", best_us(lambda: contract_problem(bare, spec), 200_000)),
        ("agent: contract_problem, schema_version 1.2.0", best_us(lambda: contract_problem(stamped, spec), 200_000)),
        (f"agent: request_key, idempotent, no key ({size}-byte payload)",
         best_us(lambda: request_key(bare, spec), 200_000)),
        ("intake: contract_version, 1 live version", best_us(lambda: contract_version(one, "^1", body), 20_000)),
        ("intake: contract_version, 2 live versions", best_us(lambda: contract_version(two, "^1", body), 20_000)),
        *client_rows(one),
    ]


def main() -> None:
    for name, us in rows():
        print(f"{name}: {us:.2f} us")


if __name__ == "__main__":
    main()
