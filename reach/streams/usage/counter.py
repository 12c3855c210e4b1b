"""The usage counter: folds the usage of terminal receipts into the spend counts the gateway's limits read.

It runs in the stream app's status role as the consumer group `<ns>.usage` on `<ns>.receipts`: each partition is
counted by one worker. For every terminal receipt that carries usage (Receipt v9) it charges the request's app
(the usage's source `gateway:<app_id>`) and its tenant, through reach.spendbook, whose guard on (message_id,
generation) counts a receipt once however often it is read: a worker restarted before its commit, a rebalance,
the agent republishing its cached terminal. Offsets are committed after Redis answered (commit after count); a
Redis outage restarts the loop from the last commit. docs/decisions/0035-usage-and-spend-limits.md.

It reads only the receipts that can charge: a receipt whose `x-reach-status` header names a status that ends no
generation, or that a router wrote (ROUTED, `x-reach-router`), is skipped before it is decoded; one without
either header is decoded, by the reader generated from Receipt.avsc (a dict), and only one that carries usage is made
a model (decision 0070: a no-op agent's COMPLETED is read for its `usage` field and let go). It runs on the batch
worker (reach.kafka.worker, decision 0053)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from pydantic import ValidationError

from reach.core.usage import billable
from reach.kafka import headers as H
from reach.kafka.codec import InvalidRecord
from reach.kafka.receiptbytes import decode_receipt
from reach.kafka.worker import INFRASTRUCTURE, Output, Record, Subscription, Worker
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from reach.spendbook import Charge, app_scope, tenant_scope
from reach.streams.exceptions import NotReady

log = logging.getLogger("reach.usage")
APP_SOURCE = "gateway:"  # reach.gateway.intake.source_of: the envelopes of a gateway app
CHARGING = frozenset(s.name for s in Status if s.is_terminal or s is Status.INPUT_REQUIRED)
"""The statuses whose receipts may carry usage (they end a generation)."""


def usage_group(names: Names) -> str:
    return names.topic("usage")


def charges(receipt: Receipt, *, currency: str) -> list[Charge]:
    """What one receipt charges: nothing unless it ends its generation (terminal, or INPUT_REQUIRED) and carries
    usage; then its tenant and, for a gateway app's request, the app. A cost in another currency than the
    deployment's is not counted (its tokens are): a limit in USD cannot add up yen."""
    usage = receipt.usage
    if usage is None or not (receipt.status.is_terminal or receipt.status is Status.INPUT_REQUIRED):
        return []  # a turn that asks (INPUT_REQUIRED) ends its generation and ran the handler: it is charged
    amounts = billable(usage, currency=currency)  # negative amounts count 0, absurd ones their bound
    for problem in amounts.problems:
        log.warning("usage of %s: %s", receipt.message_id, problem)
    tokens, cost = amounts.tokens, amounts.cost_micros
    if tokens <= 0 and cost <= 0:
        return []
    scopes = [tenant_scope(receipt.tenant)]
    if usage.source and usage.source.startswith(APP_SOURCE) and len(usage.source) > len(APP_SOURCE):
        scopes.append(app_scope(usage.source[len(APP_SOURCE):]))
    return [Charge(scope=s, message_id=receipt.message_id, generation=receipt.generation, at_ms=receipt.at,
                   tokens=tokens, cost_micros=cost) for s in scopes]


def batch_charges(receipts: Iterable[Receipt | None], *, currency: str) -> list[Charge]:
    """The charges of a batch of decoded receipts (None: a tombstone, nothing to charge)."""
    return [c for r in receipts if r is not None for c in charges(r, currency=currency)]


def cannot_charge(record: Record[Receipt | None]) -> bool:
    """True when a receipt's headers show it cannot charge (a status that ends no generation, a router's ROUTED):
    skipped without decoding. False when they do not say."""
    pairs = record.headers
    status = H.receipt_status(pairs)
    if status is not None:
        return status not in CHARGING
    return any(name == H.ROUTER for name, _ in pairs)


def with_usage(data: bytes) -> Receipt | None:
    """The receipt as its model when it carries usage, else None (it charges nothing): read by the generated reader
    (`receiptbytes.decode_receipt`, the codec for other framings); DecodeError for bytes that are no receipt."""
    record = decode_receipt(data)
    if record.get("usage") is None:
        return None
    try:
        return Receipt.from_avro(record)
    except ValidationError as exc:  # valid Avro that breaks the model's rules: skipped like undecodable bytes
        raise InvalidRecord(f"Receipt: decodes but breaks the record's rules: {exc}", raw=bytes(data)) from exc


class Book(Protocol):
    """Where charges are recorded (reach.spendbook.RedisSpendBook): once per (scope, message_id, generation)."""

    def record(self, charges: Sequence[Charge]) -> int: ...

    def close(self) -> None: ...


class UsageCounter(Worker[Receipt | None]):
    """The loop: reads receipts, records their charges, commits after Redis answered."""

    thread_name = "reach-usage"
    restart_on = (*INFRASTRUCTURE, NotReady)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, book: Callable[[], Book],
                 currency: str) -> None:
        self.worker_id = uuid.uuid4().hex[:12]
        super().__init__(kafka=kafka, subscription=Subscription(
            group=usage_group(names), topics=[names.receipts], decode=with_usage, skip=cannot_charge, profile="feed",
            consumer_config={"client.id": f"reach-usage {self.worker_id}", "auto.offset.reset": "earliest"}))
        self._book_factory = book
        self._book: Book | None = None
        self._currency = currency
        self.counted = 0

    def opened(self) -> None:
        self._book = self._book_factory()

    def closed(self) -> None:
        if self._book is not None:
            self._book.close()
            self._book = None

    def handle(self, records: list[Record[Receipt | None]]) -> Iterable[Output]:
        assert self._book is not None
        # before the commit: a crash in between counts nothing twice (the book's guard)
        self.counted += self._book.record(batch_charges((r.value for r in records), currency=self._currency))
        return ()

    def failed(self, record: Record[Receipt | None], error: BaseException) -> Iterable[Output]:
        """An undecodable receipt is skipped: the status fold judges receipts, not this counter."""
        log.debug("usage counter: %r skipped: %s", record, error)
        return ()
