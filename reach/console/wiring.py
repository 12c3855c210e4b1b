"""The console's port for the gateway that hosts it: what its routes need (Console: the operators and the backend).
The gateway builds it (reach.gateway.wiring.open_console: the apps topic's operators, the Kafka backend); the console
never imports the gateway."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from reach.console.backend import Backend
from reach.console.operators import Operator, OperatorTable
from reach.console.sessions import MemorySessions


class Operators(Protocol):
    """Who holds a token: OperatorDirectory over the apps topic, an OperatorTable fed by hand in unit tests."""

    def verify(self, token: str | None) -> Operator | None: ...


class Following(Protocol):
    """A table's feed from the apps topic (the gateway's KafkaAppDirectory): whether it still follows, how to stop."""

    @property
    def alive(self) -> bool: ...

    def stop(self) -> None: ...


class OperatorDirectory:
    """Operator tokens as the apps topic says now (a KafkaAppDirectory folding only operator records)."""

    def __init__(self, directory: Following, table: OperatorTable) -> None:
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
    sessions: MemorySessions = field(default_factory=MemorySessions)  # the login cookies (reach.console.sessions)
