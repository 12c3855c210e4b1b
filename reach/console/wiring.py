"""The console's parts for one gateway process: the operator directory (following the apps topic) and the backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reach.console.backend import Backend, ConsoleBackend
from reach.console.operators import Operator, OperatorTable
from reach.gateway.directory import KafkaAppDirectory
from reach.gateway.secrets import secret_box
from reach.gateway.settings import GatewaySettings
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings


class Operators(Protocol):
    """Who holds a token: OperatorDirectory over the apps topic, an OperatorTable fed by hand in unit tests."""

    def verify(self, token: str | None) -> Operator | None: ...


class OperatorDirectory:
    """Operator tokens as the apps topic says now (a KafkaAppDirectory folding only operator records)."""

    def __init__(self, directory: KafkaAppDirectory, table: OperatorTable) -> None:
        self._directory = directory
        self._table = table

    def verify(self, token: str | None) -> Operator | None:
        if not self._directory.alive:
            return None  # stopped following: a revoked token could pass, so none does
        return self._table.verify(token)

    def stop(self) -> None:
        self._directory.stop()


@dataclass(frozen=True)
class Console:
    """What routes_console needs; `close` stops the directory's thread."""

    operators: Operators
    backend: Backend
    close: Callable[[], None] = lambda: None


def open_console(*, reach: ReachSettings | None = None, kafka: KafkaSettings | None = None,
                 status_url: str | None = None, ready_timeout: float = 30.0) -> Console:
    """Follow the apps topic for operator tokens (returns once caught up) over the gateway's secrets key."""
    reach = reach or ReachSettings()
    kafka = kafka or KafkaSettings()
    box = secret_box(GatewaySettings().secrets_key, reach.home, create=False)
    names = Names(reach.namespace)
    table = OperatorTable(box)
    directory = KafkaAppDirectory(names=names, box=box, kafka=kafka, table=table)
    directory.start(ready_timeout)
    operators = OperatorDirectory(directory, table)
    backend = ConsoleBackend(names=names, kafka=kafka, status_url=status_url)
    return Console(operators=operators, backend=backend, close=operators.stop)
