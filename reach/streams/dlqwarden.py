"""The dead-letter warden (status role): a letter nobody redrives becomes DEAD after its POLICY's `dead_after_ms`
(7 days by default), and the owner of its agent is told once, through the channel the owner names.

It reads `<ns>.dlq` in group `<ns>.dlq-warden` on the batch worker (reach.kafka.worker): a letter not DEAD yet is
a `Hold` (its partition paused, read again when due, or within 10 minutes so a POLICY change applies); a DEAD
letter that was replayed meanwhile (the replay ledger) needs nothing; one that was not produces the owner's notice,
an envelope for the owner's channel (`channel.email`, `channel.webhook`, ...) on its capability topic, and its
offset is committed only once the notice is acknowledged. The notice's id is derived from the letter (`dead-` +
message id + generation), so a notice produced twice (a restart before the commit) is one message to the channel
agent's idempotency. A letter with no agent owner (a NO_ROUTE letter: no agent ever had it) goes to the owner of the
gateway app that sent it (`reach apps create|update --owner`). A letter nobody owns is counted and logged, not retried.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping

from reach import dlq
from reach.appstore import read_apps
from reach.channels.catalog import CAPABILITY_VERSION, channel
from reach.channels.errors import BadCallback
from reach.channels.spec import parse
from reach.envelopes import BUDGET_MS, DELIVERY_TIMEOUT_MS, now_ms
from reach.errors import InfraUnavailable, ReachError
from reach.kafka import codec
from reach.kafka import worker as w
from reach.names import Names
from reach.records import AgentRegistration, App, Envelope, Policy
from reach.registry import read_registry
from reach.settings import KafkaSettings

log = logging.getLogger("reach.dlq")
SOURCE = "reach-dlq-warden"
RECHECK_S = 600.0  # a held letter is looked at again at least this often (a POLICY change applies by then)


def notice(item: dlq.Letter, owner: str, *, now: int) -> Envelope:
    """The owner's notice of a DEAD letter: an envelope for the owner's channel (BadCallback for an owner that is
    not a channel target any more)."""
    spec = parse(owner)
    rec = item.record
    mid = f"dead-{item.message_id or item.id}-{rec.generation}"
    body = {"kind": "dead_letter", "letter": item.id, "message_id": item.message_id, "capability": item.capability,
            "agent_id": rec.agent_id, "reason": rec.reason, "error": rec.error.model_dump() if rec.error else None,
            "attempts": rec.attempts, "last_failure_at": rec.last_failure_at,
            "redrive": f"reach dlq replay --id {item.id}"}
    payload = {"endpoint": spec.endpoint, "body": body,
               "subject": f"Reach: a dead letter of {item.capability or 'an unknown capability'} is DEAD"}
    return Envelope(message_id=mid, trace_id=mid, tenant="default", source=SOURCE,
                    capability=channel(spec.channel).capability, capability_version=f"^{CAPABILITY_VERSION}",
                    payload=json.dumps(payload, separators=(",", ":")).encode(), created_at=now,
                    deadline=now + BUDGET_MS, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, idempotency_key=mid)


class DeadLetterWarden(w.Worker[bytes]):
    """Holds each letter until it is DEAD, then tells its owner (module docstring). start()/stop() from any thread."""

    thread_name = "reach-dlq-warden"
    label = "dlq warden"
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, policy: Callable[[str], Policy],
                 registrations: Callable[[], list[AgentRegistration]] | None = None,
                 apps: Callable[[], Mapping[str, App]] | None = None,
                 ledger: Callable[[], set[str]] | None = None, clock: Callable[[], int] = now_ms) -> None:
        # notices are not waited for by anyone at the moment they are produced: batched (the feed profile)
        super().__init__(kafka=kafka, subscription=w.Subscription(group=names.topic("dlq-warden"), topics=[names.dlq],
                                                                  profile="idle", producer_profile="feed"))
        self.names = names
        self._policy = policy
        self._registrations = registrations or (
            lambda: [i.registration for i in read_registry(kafka, names).instances(now_ms())])
        self._apps = apps or (lambda: read_apps(names, kafka))
        self._ledger = ledger or (lambda: dlq.replayed_keys(names, kafka))
        self._clock = clock
        self.dead = 0
        self.told = 0
        self.unowned = 0

    def handle(self, records: list[w.Record[bytes]]) -> Iterable[w.Output | w.Hold]:
        now = self._clock()
        out: list[w.Output | w.Hold] = []
        held: set[tuple[str, int]] = set()
        due: list[tuple[w.Record[bytes], dlq.Letter]] = []
        for record in records:
            tp = (record.topic, record.partition)
            if tp in held:
                continue  # behind a held letter: read again with it
            item = dlq.parse(record.partition, record.offset, 0, record.raw or b"")
            if item is None:
                continue  # a record that is no dead letter: nothing to watch
            dead_at = dlq.dead_at(item, self._policy(item.capability or "*"))
            if dead_at > now:
                held.add(tp)
                out.append(w.Hold(record.position, min(RECHECK_S, (dead_at - now) / 1000)))
            else:
                due.append((record, item))
        if due:
            out += self._tell(due, now)
        return out

    def _tell(self, due: list[tuple[w.Record[bytes], dlq.Letter]], now: int) -> list[w.Output]:
        try:
            ledger, registrations, apps = self._ledger(), self._registrations(), self._apps()
        except InfraUnavailable:
            raise
        except ReachError as exc:  # not read: nobody may be told of a letter that was replayed; read again later
            raise InfraUnavailable(f"the dlq warden cannot read the replay ledger, the registry or the apps: {exc}"
                                   ) from exc
        out = []
        for record, item in due:
            if dlq.ledger_key(item.message_id or item.id, item.record.generation) in ledger:
                continue  # redriven: not DEAD
            self.dead += 1
            owner = dlq.owner_of(item, registrations, apps)
            if owner is None:
                self.unowned += 1
                log.warning("dead letter %s (%s, %s) is DEAD and neither an agent of it nor its app names an owner: "
                            "nobody is told",
                            item.id, item.capability, item.record.agent_id)
                continue
            try:
                envelope = notice(item, owner, now=now)
            except BadCallback as exc:
                self.unowned += 1
                log.warning("dead letter %s is DEAD but its owner %r is no channel target (%s)", item.id, owner, exc)
                continue
            out.append(w.Output(self.names.capability(envelope.capability), codec.encode(envelope),
                                key=envelope.message_id.encode(), cause=record.position))
            self.told += 1
            log.info("dead letter %s is DEAD: telling %s", item.id, owner)
        return out

    def failed(self, record: w.Record[bytes], error: BaseException) -> Iterable[w.Output]:
        """A notice the broker refused for good (e.g. the channel's capability topic does not exist): logged; the
        letter stays on the dlq for `reach dlq ls --dead`."""
        log.warning("dlq warden: no notice for the letter at %s: %r", record.position, error)
        return []
