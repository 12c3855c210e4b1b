"""The timekeeper's I/O: expire spent budgets, reroute envelopes nobody started (re-read from the inbox).

A row is marked done only when every record its action produced is acknowledged; what the flush
leaves unacknowledged is acted on again next tick (receivers are idempotent). An envelope counts as
gone only when its inbox offset is below the partition's log start; a read that merely times out (a
leader move) is retried next tick. It gets a row only once the status fold has read that row's partition past
the row's due time (StatusFold.due_rows). The fence stays the backstop: every terminal it decides claims the
message's terminal slot first (reach.terminals; one round trip per tick), and a reroute of a message whose slot is
taken (it ended meanwhile) is skipped and republishes that ending (its own dead letter: the letter too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from reach import dlq
from reach.core import fallback
from reach.core.deadlines import Due, Task, due_tasks
from reach.core.lifecycle import StatusRow
from reach.core.retry import Action, Failure, Limits
from reach.envelopes import now_ms
from reach.failures import Outgoing, after_failure
from reach.kafka import clients, codec, delivery
from reach.kafka import headers as H
from reach.kafka.acks import Acks, Position
from reach.kafka.codec import DecodeError
from reach.kafka.topicreader import Missing, read_one
from reach.kafka.types import Producer
from reach.names import Names
from reach.records import Envelope, ErrorInfo, Policy, Receipt, Status
from reach.settings import KafkaSettings, RedisSettings
from reach.terminals import Fence, Terminal, fence_from_settings

log = logging.getLogger("reach.timekeeper")
_MAX_MARKS = 100_000
REFUSED_BY_BROKER = "REFUSED_BY_BROKER"  # the router's reason for a record the broker will never take


Fetch = Missing  # why an inbox record was not returned (reach.kafka.topicreader)


class Timekeeper:
    """Acts on due rows once each (marks are remembered; a restart may act once more: receivers are idempotent)."""

    def __init__(self, *, names: Names, tiers: list[str], kafka: KafkaSettings,
                 policy: Callable[[str], Policy | None] = lambda _: None, redis: RedisSettings,
                 fence: Fence | None = None) -> None:
        self._policy = policy
        self.fence = fence or fence_from_settings("timekeeper", namespace=names.namespace, redis_settings=redis)
        self.names = names
        self.tiers = tiers
        self._kafka = kafka
        self._producer: Producer | None = None
        self._marks: set[tuple[str, int, int, str]] = set()
        self.expired = 0
        self.rerouted = 0
        self.superseded = 0  # terminals it decided for a message that had already ended (it republished that)
        self.skipped = 0     # reroutes of messages whose slot was taken: they ended meanwhile

    def tick(self, rows: Iterable[StatusRow], now: int | None = None) -> int:
        """Handle every due row; blocking (run it in an executor). Returns how many were acted on."""
        tasks = [t for t in due_tasks(rows, now if now is not None else now_ms()) if t.mark not in self._marks]
        if not tasks:
            return 0
        ended = self._ended(tasks)
        producer = self._producer_()
        acks = Acks()
        acted: list[tuple[Task, Position]] = []
        decided: dict[Position, tuple[StatusRow, Envelope, bytes]] = {}
        planned: list[_Plan] = []
        for i, task in enumerate(tasks):
            position = (task.row.message_id, task.row.generation, i)
            try:
                plan = self._plan(task, position, decided, ended.get(task.mark))
            except Exception as exc:  # noqa: BLE001 - one row's failure must not hold back the others
                log.warning("timekeeper: %s of %s failed: %r; trying again next tick", task.due,
                            task.row.message_id, exc)
                acks.fail(position, exc)
                acted.append((task, position))
                continue
            if plan is None:
                acks.fail(position, "the envelope could not be read yet")
                continue
            planned.append(plan)
            acted.append((task, position))
        won: dict[Position, bytes] = {}
        self._produce(producer, acks, planned, decided, won)
        remaining = producer.flush(30)
        if self._refused_for_good(producer, acks, decided, won):
            remaining = producer.flush(30)
        unacked = set(acks.unacked())
        done = [task for task, position in acted if position not in unacked]
        if unacked:
            log.warning("timekeeper: %d row(s) not acknowledged (%d record(s) still queued); acting again next tick",
                        len(unacked), remaining)
        if len(self._marks) > _MAX_MARKS:
            self._marks.clear()
        self._marks.update(t.mark for t in done)
        return len(done)

    def _plan(self, task: Task, position: Position, decided: dict[Position, tuple[StatusRow, Envelope, bytes]],
              winner: bytes | None) -> _Plan | None:
        """What a due row causes; a reroute of a message that ended (`winner`) republishes that ending instead,
        unless it was the timekeeper's own dead letter: decided again, its claim then writes the letter too."""
        if winner is not None and not _own_letter(winner):
            return _Plan(position, (_receipt_record(self.names, task.row.message_id, winner),))
        plan = self._expire(task.row, position) if task.due is Due.EXPIRE else self._reroute(task, position, decided)
        if winner is not None and plan is not None and plan.terminal is None:
            decided.pop(position, None)  # decided again as a reroute or a retry: never for a message that ended
            return _Plan(position, (_receipt_record(self.names, task.row.message_id, winner),))
        return plan

    def _ended(self, tasks: list[Task]) -> dict[tuple[str, int, int, str], bytes]:
        """The winners of the reroutes whose terminal slot is taken (the row is behind, the message ended), by mark.
        Such a reroute is skipped but republishes the winner (a late terminal, identical), so a receipt reaches the
        log even when it was the timekeeper's own ending whose records failed; when that ending was its own dead
        letter, the reroute is decided again so the claim writes the letter too (reach.terminals, same_ending)."""
        reroutes = [t for t in tasks if t.due is Due.REROUTE]
        ended = {t.mark: winner for t, winner in zip(reroutes, self.fence.peek(
            [(t.row.message_id, t.row.generation) for t in reroutes]), strict=True) if winner is not None}
        if ended:
            self.skipped += len(ended)
            log.info("timekeeper: %d reroute(s) skipped, their messages ended already (the status rows are behind)",
                     len(ended))
        return ended

    def _expire(self, row: StatusRow, position: Position) -> _Plan:
        error = ErrorInfo(kind="BUDGET", code="DEADLINE_EXCEEDED",
                          message=f"the total budget ended at {row.deadline} while the message was {row.status}")
        return _Plan.ending(self.names, position, _receipt(row, Status.EXPIRED, error=error))

    def _reroute(self, task: Task, position: Position,
                 decided: dict[Position, tuple[StatusRow, Envelope, bytes]]) -> _Plan | None:
        """What a delivery timeout causes; None when the envelope cannot be read yet (retried)."""
        row = task.row
        raw = self._fetch(row.inbox) if row.inbox else Fetch.GONE
        if raw is Fetch.PENDING:
            return None
        try:
            envelope = codec.decode(raw, Envelope) if isinstance(raw, bytes) else None
        except DecodeError:
            envelope = None
        if not isinstance(raw, bytes) or envelope is None:
            why = "is below the log start (retention)" if raw is Fetch.GONE else "does not decode"
            error = ErrorInfo(kind="DELIVERY", code="ENVELOPE_GONE",
                              message=f"delivery timed out and the envelope at {row.inbox} {why}")
            # the fold looks for an earlier envelope of it (the row's envelope_at) and notes why none was sent
            return replace(_Plan.ending(self.names, position, _receipt(row, Status.FAILED, error=error)), ask=True)
        late = ErrorInfo(kind="DELIVERY", code="DELIVERY_TIMEOUT",
                         message=f"{row.routed_instance} did not start it within {envelope.delivery_timeout_ms} ms")
        after = after_failure(Failure.DELIVERY, envelope, error=late, names=self.names, tiers=self.tiers,
                              limits=Limits.resolve(envelope, self._policy(envelope.capability)), now_ms=now_ms(),
                              failed_instance=row.routed_instance, raw=raw, origin=row.inbox or ("", -1, -1))
        decided[position] = (row, envelope, raw)
        terminal = None
        if after.receipt.status.is_terminal:  # EXPIRE or DEAD_LETTER: the receipt is the last record
            terminal = Terminal(envelope.message_id, envelope.generation, cast(bytes, after.records[-1].value))
        # retries exhausted (DEAD_LETTERED): the capability's fallback gets it, sent by the status fold (0046)
        return _Plan(position, after.records, terminal, after.action, ask=fallback.serves(after.receipt.status))

    def _produce(self, producer: Producer, acks: Acks, plans: Sequence[_Plan],
                 decided: dict[Position, tuple[StatusRow, Envelope, bytes]], won: dict[Position, bytes]) -> None:
        """Claim every terminal of the plans in one round trip, then produce: a winner its records, a loser only
        the winner's receipt (no dead letter, no retry for a message that ended). `won` keeps the winners' receipt
        bytes; a position already in it (its terminal won this tick, then its letter was refused) keeps the slot:
        its records, ending with that stored receipt (it may have landed already), never a second, different one."""
        claims = self.fence.claim_once([(p.position, p.terminal) for p in plans], won)
        for plan, claim in zip(plans, claims, strict=True):
            records = plan.records
            if claim is not None and claim.won:  # its own, or its own earlier ending of this row (same_ending)
                records = (*records[:-1], replace(records[-1], value=claim.receipt))  # the receipt is the last
                if plan.ask:  # its own ending (also while Redis is out: availability) asks for the fallback
                    records = (*records[:-1], _asking(records[-1]))
            if claim is not None and not claim.won:
                self.superseded += 1
                decided.pop(plan.position, None)
                records = (_receipt_record(self.names, plan.position[0], claim.receipt),)
            elif plan.action is Action.REROUTE:
                self.rerouted += 1
            elif plan.action is Action.EXPIRE:
                self.expired += 1
            try:
                _in_order(producer, acks, plan.position, records)
            except Exception as exc:  # noqa: BLE001 - one row's failure must not hold back the others
                log.warning("timekeeper: producing for %s failed: %r; trying again next tick", plan.position[0], exc)
                acks.fail(plan.position, exc)

    def _refused_for_good(self, producer: Producer, acks: Acks,
                          decided: dict[Position, tuple[StatusRow, Envelope, bytes]],
                          won: dict[Position, bytes]) -> bool:
        """A reroute, retry or letter the broker refuses for good (too large, topic gone) would be refused every
        tick: the envelope is dead-lettered instead and the row DEAD_LETTERED (its receipt after the letter)."""
        refused = [p for p in acks.unacked()
                   if p in decided and acks.errors(p) and all(delivery.permanent(e) for e in acks.errors(p))]
        plans = []
        for position in refused:
            row, envelope, raw = decided.pop(position)
            why = delivery.describe(acks.errors(position)[0])
            acks.reset(position)
            error = ErrorInfo(kind="DELIVERY", code=REFUSED_BY_BROKER,
                              message=f"delivery timed out and the broker refused its retry for good: {why}"[:1000])
            value, hdrs = dlq.letter(raw, reason=REFUSED_BY_BROKER, error=error, origin=row.inbox or ("", -1, -1),
                                     envelope=envelope, agent_id=row.agent_id)
            receipt = _receipt(row, Status.DEAD_LETTERED, error=error)
            letter = Outgoing(self.names.dlq, envelope.message_id, value, hdrs)
            ending = _Plan.ending(self.names, position, receipt)
            plans.append(_Plan(position, (letter, *ending.records), ending.terminal, Action.DEAD_LETTER))
        self._produce(producer, acks, plans, decided, won)
        return bool(refused)

    def _fetch(self, inbox: tuple[str, int, int]) -> bytes | None | Fetch:
        """The inbox record (None for a tombstone), GONE when it can never be read, PENDING when not read in time."""
        return read_one("timekeeper", self._kafka, inbox)

    def _producer_(self) -> Producer:
        if self._producer is None:
            self._producer = clients.producer(self._kafka, profile="hot")
        return self._producer


@dataclass(frozen=True)
class _Plan:
    """What one due row causes, in order; `terminal` is the receipt it ends the message with (claimed first)."""

    position: Position
    records: tuple[Outgoing, ...]
    terminal: Terminal | None = None
    action: Action | None = None
    ask: bool = False  # its ending asks the status fold for the capability's fallback (reach.core.fallback.asked)

    @classmethod
    def ending(cls, names: Names, position: Position, receipt: Receipt) -> _Plan:
        value = codec.encode(receipt)
        action = Action.EXPIRE if receipt.status is Status.EXPIRED else None
        return cls(position, (_receipt_record(names, receipt.message_id, value, receipt.status),),
                   Terminal(receipt.message_id, receipt.generation, value), action)


def _own_letter(winner: bytes) -> bool:
    """Whether a stored winner is one of the timekeeper's own dead letters (decoded only for a taken slot)."""
    try:
        ending = codec.decode(winner, Receipt)
    except Exception:  # noqa: BLE001 - an unreadable winner is not its own: republished as it is
        return False
    return ending.status is Status.DEAD_LETTERED and ending.error is not None and \
        ending.error.code in (dlq.RETRIES_EXHAUSTED, REFUSED_BY_BROKER)


def _asking(record: Outgoing) -> Outgoing:
    """A terminal receipt record marked for the fold's fallback (H.FALLBACK_ASK, the ender's name)."""
    return replace(record, headers=[*record.headers, (H.FALLBACK_ASK, b"timekeeper")])


def _receipt_record(names: Names, message_id: str, value: bytes, status: Status | None = None) -> Outgoing:
    """A receipt for the receipts topic; with its `status` when known here (readers skip on it, H.STATUS)."""
    return Outgoing(names.receipts, message_id, value, [(H.MESSAGE_ID, message_id.encode()),
                                                        *([H.status_header(status.name)] if status else [])])


def _in_order(producer: Producer, acks: Acks, position: Position, records: Sequence[Outgoing]) -> None:
    """Produce each record from the previous one's delivery report: a receipt is written only after the record
    it announces is acknowledged, so a refused retry never leaves a RETRY_SCHEDULED/ACCEPTED row without it."""
    first, *rest = records
    value = cast(bytes, first.value)  # after_failure and the letters here never produce a tombstone
    delivery.produce(producer, acks, position, first.topic, value, key=first.key.encode(), headers=first.headers,
                     then=(lambda _msg: _in_order(producer, acks, position, rest)) if rest else None)


def _receipt(row: StatusRow, status: Status, **fields: object) -> Receipt:
    return Receipt.model_validate({
        "message_id": row.message_id, "generation": row.generation, "trace_id": row.trace_id, "tenant": row.tenant,
        "capability": row.capability, "status": status, "attempt": row.attempt, "at": now_ms(),
        "deadline": row.deadline, "reroutes": row.reroutes, "callback": row.callback, **fields,
    })
