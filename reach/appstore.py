"""Creating, rotating and revoking gateway apps: read the apps topic, change one record, write it back acked.

The log the store reads and writes is a seam: KafkaAppLog (the compacted `<ns>.apps` topic) in production,
MemoryAppLog in unit tests. Writes are read-modify-write of one record per app: two operators changing the
same app at the same instant race (the later write wins), which the CLI's use does not make a problem.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from reach import apps
from reach.apps import AppError, NewKey, check_opens, decode_app
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.kafka import codec, topicreader
from reach.kafka.acked import AckedProducer
from reach.kafka.types import KafkaException
from reach.kafka.worker import Output
from reach.names import Names
from reach.records import App, SpendLimit
from reach.secretbox import SecretBox
from reach.settings import KafkaSettings

log = logging.getLogger("reach.appstore")


@contextmanager
def kafka_guarded(what: str) -> Iterator[None]:
    """librdkafka's errors (no broker, metadata timeout) as InfraUnavailable (exit 4)."""
    try:
        yield
    except KafkaException as exc:
        raise InfraUnavailable(f"The Kafka broker did not answer while {what} ({exc.args[0].str()}); check "
                               "REACH_BOOTSTRAP or run `reach local up`.") from None


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


def read_apps(names: Names, kafka: KafkaSettings, timeout: float = 15.0) -> dict[str, App]:
    """The compacted apps topic read to its end (no consumer group): the newest record of every app, operators
    included; a bad record is logged and skipped (no secret is opened here)."""
    found: dict[str, App] = {}
    reader = topicreader.open_reader("apps", kafka, profile="idle")
    try:
        with kafka_guarded(f"reading {names.apps}"):
            starts = topicreader.start_offsets(reader, names.apps, None, timeout)
            for msg in topicreader.read_range(reader, names.apps, starts, idle_timeout=timeout):
                try:
                    app_id, app = decode_app(msg.key(), msg.value())
                except codec.RegistryUnavailable:
                    raise
                except Exception as exc:  # noqa: BLE001 - DecodeError, bad UTF-8, a mismatched key
                    log.warning("skipping a bad apps record at %s@%d: %s", names.apps, msg.offset(), exc)
                    continue
                if app is None:
                    found.pop(app_id, None)
                else:
                    found[app_id] = app
    finally:
        reader.close()
    return found


class KafkaAppLog:
    """The compacted apps topic: read to its end (no consumer group), append with an idempotent producer
    and wait for the broker's acknowledgement."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, timeout: float = 15.0) -> None:
        self._names = names
        self._kafka = kafka
        self._timeout = timeout
        self._producer = AckedProducer(kafka)

    def read(self) -> dict[str, App]:
        """The newest record of every app; a bad record is logged and skipped (no secret is opened here)."""
        return read_apps(self._names, self._kafka, self._timeout)

    def append(self, app: App) -> None:
        with kafka_guarded(f"writing {self._names.apps}"):
            errors = self._producer.send([Output(self._names.apps, codec.encode(app), key=app.app_id.encode())],
                                         timeout=self._timeout)
        if errors:
            raise InfraUnavailable(
                f"The apps record of {app.app_id} was not acknowledged ({', '.join(errors)}). "
                f"Check that the broker is up and `reach topics apply` created {self._names.apps}.")


def _operator() -> str:
    try:
        return f"reach-cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "reach-cli"


class AppStore:
    """App lifecycle over an AppLog; every change is one new record of the whole app. `box` (the secrets key)
    is needed only to make keys: listing and revoking work without it, so a compromised app can always be
    revoked."""

    def __init__(self, *, log: AppLog, box: SecretBox | None, by: str | None = None) -> None:
        self._log = log
        self._box = box
        self._by = by or _operator()

    def _sealer(self) -> SecretBox:
        if self._box is None:
            raise AppError("Making a key needs the secrets key: this AppStore was built without one.")
        return self._box

    def all(self) -> list[App]:
        return sorted((a for a in self._log.read().values() if a.role is None), key=lambda a: (a.created_at, a.app_id))

    def get(self, app_id: str) -> App:
        app = self._log.read().get(app_id)
        if app is None or app.role is not None:  # console operators are `reach operators`' business
            raise AppError(f"No app {app_id!r} on the apps topic: expected an id from `reach apps ls`.")
        return app

    def create(self, *, name: str, tenant: str, capabilities: list[str], rate: float, burst: int,
               limits: list[SpendLimit] | None = None, owner: str | None = None) -> NewKey:
        app, made = apps.new_app(self._sealer(), name=name, tenant=tenant, capabilities=capabilities, rate=rate,
                                 burst=burst, now_ms=now_ms(), by=self._by, owner=owner)
        self._log.append(app.model_copy(update={"limits": limits or []}))
        return made

    def set_limits(self, app_id: str, limits: list[SpendLimit]) -> App:
        """The app's spend limits replaced (gateways follow within about a second)."""
        app = apps.limited(self.get(app_id), limits, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return app

    def set_owner(self, app_id: str, owner: str | None) -> App:
        """The app's owner replaced (None: none)."""
        app = apps.owned(self.get(app_id), owner, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return app

    def rotate(self, app_id: str) -> NewKey:
        """A new key sealed under the same secrets key as the app's live keys (else SecretUnreadable: a key
        sealed differently would make the gateways skip the whole record)."""
        current = self.get(app_id)
        check_opens(self._sealer(), current)
        app, made = apps.rotated(self._sealer(), current, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return made

    def set_quota(self, app_id: str, *, rate: float, burst: int) -> App:
        app = apps.requota(self.get(app_id), rate=rate, burst=burst, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return app

    def revoke(self, app_id: str, *, key_id: str | None = None) -> App:
        app = apps.revoked(self.get(app_id), key_id=key_id, now_ms=now_ms(), by=self._by)
        self._log.append(app)
        return app
