"""Creating, rotating and revoking gateway apps: read the apps topic, change one record, write it back acked.

The log the store reads and writes is a seam: KafkaAppLog (the compacted `<ns>.apps` topic) in production,
MemoryAppLog in unit tests. Writes are read-modify-write of one record per app: two operators changing the
same app at the same instant race (the later write wins), which the CLI's use does not make a problem.
"""

from __future__ import annotations

import getpass
from typing import Any, Protocol

from confluent_kafka import Producer

from reach import codec, topicreader
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.gateway import apps
from reach.gateway.apps import AppError, AppTable, NewKey
from reach.gateway.secrets import SecretBox
from reach.names import Names
from reach.records import App
from reach.settings import KafkaSettings


class AppLog(Protocol):
    """Where app records live: every current record, and an acknowledged append."""

    def read(self) -> dict[str, App]: ...

    def append(self, app: App) -> None: ...


class MemoryAppLog:
    """An AppLog in memory, for unit tests; `records` keeps every append in order."""

    def __init__(self) -> None:
        self.records: list[App] = []

    def read(self) -> dict[str, App]:
        return {a.app_id: a for a in self.records}

    def append(self, app: App) -> None:
        self.records.append(app)


class KafkaAppLog:
    """The compacted apps topic: read to its end (no consumer group), append with an idempotent producer
    and wait for the broker's acknowledgement."""

    def __init__(self, *, names: Names, box: SecretBox, kafka: KafkaSettings | None = None,
                 timeout: float = 15.0) -> None:
        self._names = names
        self._box = box
        self._kafka = kafka or KafkaSettings()
        self._timeout = timeout
        self._producer: Producer | None = None

    def read(self) -> dict[str, App]:
        table = AppTable(self._box)
        reader = topicreader.open_reader("apps", self._kafka)
        try:
            starts = topicreader.start_offsets(reader, self._names.apps, None, self._timeout)
            for msg in topicreader.read_range(reader, self._names.apps, starts, idle_timeout=self._timeout):
                table.apply_raw(msg.key(), msg.value(), where=f"{self._names.apps}@{msg.offset()}")
        finally:
            reader.close()
        return table.apps()

    def append(self, app: App) -> None:
        if self._producer is None:
            self._producer = Producer(self._kafka.producer())
        errors: list[str] = []

        def _report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        self._producer.produce(self._names.apps, key=app.app_id.encode(), value=codec.encode(app),
                               on_delivery=_report)
        if self._producer.flush(self._timeout) or errors:
            raise InfraUnavailable(
                f"The apps record of {app.app_id} was not acknowledged ({', '.join(errors) or 'timed out'}). "
                f"Check that the broker is up and `reach topics apply` created {self._names.apps}.")


def _operator() -> str:
    try:
        return f"reach-cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "reach-cli"


class AppStore:
    """App lifecycle over an AppLog; every change is one new record of the whole app."""

    def __init__(self, *, log: AppLog, box: SecretBox, by: str | None = None) -> None:
        self._log = log
        self._box = box
        self._by = by or _operator()

    def all(self) -> list[App]:
        return sorted(self._log.read().values(), key=lambda a: (a.created_at, a.app_id))

    def get(self, app_id: str) -> App:
        app = self._log.read().get(app_id)
        if app is None:
            raise AppError(f"No app {app_id!r} on the apps topic: expected an id from `reach apps ls`.")
        return app

    def create(self, *, name: str, tenant: str, capabilities: list[str], rate: float, burst: int) -> NewKey:
        app, made = apps.new_app(self._box, name=name, tenant=tenant, capabilities=capabilities, rate=rate,
                                 burst=burst, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return made

    def rotate(self, app_id: str) -> NewKey:
        app, made = apps.rotated(self._box, self.get(app_id), now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return made

    def revoke(self, app_id: str, *, key_id: str | None = None) -> App:
        app = apps.revoked(self.get(app_id), key_id=key_id, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return app
