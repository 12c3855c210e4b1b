"""The usage counter: folds the usage of terminal receipts into the spend counts the gateway's limits read.

It runs in the stream app's status role as the consumer group `<ns>.usage` on `<ns>.receipts`: each partition is
counted by one worker. For every terminal receipt that carries usage (Receipt v9) it charges the request's app
(the usage's source `gateway:<app_id>`) and its tenant, through reach.spendbook, whose guard on (message_id,
generation) counts a receipt once however often it is read: a worker restarted before its commit, a rebalance,
the agent republishing its cached terminal. Offsets are committed after Redis answered (commit after count); a
Redis outage restarts the loop from the last commit. docs/decisions/0035-usage-and-spend-limits.md."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from reach.core.commits import CommitLedger, TopicPart
from reach.core.usage import billable
from reach.errors import InfraUnavailable, TopicMissing
from reach.kafka import clients, codec, topicreader
from reach.kafka.codec import DecodeError, RegistryUnavailable
from reach.names import Names
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from reach.spendbook import Charge, RedisSpendBook, app_scope, tenant_scope
from reach.streams.exceptions import NotReady
from reach.streams.supervised import SupervisedLoop

log = logging.getLogger("reach.usage")
APP_SOURCE = "gateway:"  # reach.gateway.intake.source_of: the envelopes of a gateway app


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


def batch_charges(messages: list[Message], *, currency: str) -> tuple[list[Charge], dict[TopicPart, int]]:
    """The charges of a batch and the commit points once they are counted; an undecodable receipt is skipped (the
    status fold dead-letters nothing here: it is not this counter's to judge)."""
    found: list[Charge] = []
    commits: dict[TopicPart, int] = {}
    for msg in messages:
        if msg.error() is not None:
            continue
        commits[msg.topic() or "", msg.partition() or 0] = (msg.offset() or 0) + 1
        try:
            receipt = codec.decode(msg.value() or b"", Receipt)
        except DecodeError:
            continue
        found.extend(charges(receipt, currency=currency))
    return found, commits


class UsageCounter(SupervisedLoop):
    """The Kafka shell: reads receipts, records their charges, commits after Redis answered."""

    thread_name = "reach-usage"
    restart_on = (KafkaException, NotReady, RegistryUnavailable, InfraUnavailable)
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, book: Callable[[], RedisSpendBook],
                 currency: str) -> None:
        super().__init__()
        self._names = names
        self._kafka = kafka
        self._book = book
        self._currency = currency
        self.worker_id = uuid.uuid4().hex[:12]
        self.counted = 0

    def _loop(self) -> None:
        names, ledger, owned = self._names, CommitLedger(), set[TopicPart]()
        consumer = clients.consumer(usage_group(names), self._kafka, profile="feed", **{
            "client.id": f"reach-usage {self.worker_id}", "auto.offset.reset": "earliest",
            "on_commit": lambda err, tps: clients.on_commit(ledger, err, tps)})
        book = self._book()

        def assigned(_c: Consumer, tps: list[TopicPartition]) -> None:
            owned.update((tp.topic, tp.partition) for tp in tps)

        def revoked(c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            clients.commit_now(c, ledger, parts)
            ledger.forget(parts)
            owned.difference_update(parts)

        def lost(_c: Consumer, tps: list[TopicPartition]) -> None:
            parts = [(tp.topic, tp.partition) for tp in tps]
            ledger.forget(parts)
            owned.difference_update(parts)

        try:
            try:
                topicreader.partitions(consumer, names.receipts)
            except TopicMissing as exc:  # not applied yet: try again after the backoff
                raise NotReady(str(exc)) from None
            consumer.subscribe([names.receipts], on_assign=assigned, on_revoke=revoked, on_lost=lost)
            self._mark_ready()
            while not self._stop.is_set():
                found, commits = batch_charges(clients.take(consumer, 500, 0.5), currency=self._currency)
                self.counted += book.record(found)  # before the commit: a crash in between counts nothing twice
                ledger.want({tp: o for tp, o in commits.items() if tp in owned})
                clients.send_commits(consumer, ledger, owned)
            clients.commit_now(consumer, ledger)
        finally:
            consumer.close()
            book.close()
