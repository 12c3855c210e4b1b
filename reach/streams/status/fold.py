"""The status fold: a confluent-kafka loop over `<ns>.receipts` writing rows, changelog and replies per batch.

Per batch: decode each receipt, fold it (pure `reach.core.lifecycle.apply`, on dicts) onto the row
as it stands in this batch; produce each reply to its `<ns>.replies.*` topic and flush; then one
changelog record per changed row to the status partition of the same number, and flush; only when
the broker acknowledged all of them write the rows to the partition stores (RocksDB) and commit the
receipts offsets. Replies and callbacks (a terminal row's callback envelope to its channel capability, see
reach.channels.closure) go first so no changelog record says `replied` / `callback_sent` before the
broker acknowledged them; so does a fallback child (an agent's ending its capability's POLICY `fallback` serves,
reach.core.fallback: the envelope is read back from the inbox through the Fallbacks port), before a changelog
record names it. A refused record rewinds the batch (at least once; the fold is idempotent), except a
reply no retry cures (too large, topic gone), which is counted and logged. A registry outage is
infrastructure: nothing commits, the batch is read again after a backoff.
On assignment a partition's store is trusted when it has applied the changelog up to its end, else
caught up from the offset it recorded (or rebuilt from the start when that offset is gone).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from reach.core import fallback, fanout, lifecycle
from reach.core.commits import CommitLedger
from reach.core.lifecycle import FallbackRef, Row, StatusRow
from reach.envelopes import now_ms
from reach.kafka import clients, codec, delivery, receiptbytes, topicreader
from reach.kafka import headers as H
from reach.kafka.acks import Acks, Position
from reach.kafka.clients import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from reach.kafka.codec import DecodeError, RegistryUnavailable, decode_dict, encode_dict
from reach.kafka.supervised import SupervisedLoop
from reach.metrics import Metrics
from reach.names import Names
from reach.records import Envelope, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import DeliveryFailed, StreamsError
from reach.streams.status import keys, tenants
from reach.streams.status.lookup import OWNER_PREFIX, partition_of
from reach.streams.status.ports import Callbacks, Fallbacks, NoFallbacks
from reach.streams.status.store import PartitionStore

FRONTIER_SLACK_MS = 1_000
"""A fetch response's high watermark is at most fetch.wait.max.ms (100) plus a round trip old: a level partition
has folded what was appended up to a second before."""
log = logging.getLogger("reach.status")
_TERMINAL = frozenset(s.value for s in Status if s.is_terminal)
_Reply = tuple[Position, str, str, bytes, str | None]
"""(the receipt's position, reply topic, message id, reply bytes, the fallback child it names or None)."""
_Out = tuple[Position, str, str, bytes, str]
"""(the receipt's position, topic, key, value, message id): a callback or a fallback child."""
_RECOVERY_BATCH = 5_000
_LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT})


def fold_group(names: Names) -> str:
    """The fold's consumer group; its members' client ids carry their HTTP address (routed lookups)."""
    return f"{names.router_app_id}.status"


class StatusFold(SupervisedLoop):
    """The status table's only writer; readers (views, timekeeper, gauges) use `row`, `due_rows`, ... ."""

    thread_name = "reach-status-fold"
    label = "status fold"
    restart_on = (KafkaException, StreamsError)  # a fresh consumer resumes from the committed offsets
    stop_timeout_s = 15.0
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, metrics: Metrics, state_dir: Path, url: str,
                 retention_ms: int, callbacks: Callbacks, fallbacks: Fallbacks | None = None,
                 batch_size: int = 1_000) -> None:
        super().__init__()
        self.names = names
        self.url = url
        self._kafka = kafka
        self._metrics = metrics
        self._dir = state_dir
        self._retention_ms = retention_ms
        self._batch_size = batch_size
        self._callbacks = callbacks
        self._fallbacks = fallbacks or NoFallbacks()
        self._stores: dict[int, PartitionStore] = {}
        self._ledger = CommitLedger()  # one async commit in flight; a restarted loop starts a fresh one
        self._reply_topics: dict[str, float] = {}  # topics seen to exist, and when (a miss is never cached)
        self._replies_family: set[str] = set()  # reply_to headers seen to name a <ns>.replies.* topic
        self._sweep_every = max(1.0, min(60.0, retention_ms / 2000))
        self._next_sweep = 0.0
        self.partitions = 0
        # receipts partition -> wall ms before which every receipt appended there is folded (the timekeeper acts on
        # rows due before it only: a fold that lags delays a reroute or an expiry instead of deciding on a stale row)
        self.frontier: dict[int, int] = {}
        self._start_offsets: dict[int, int] = {}  # where an assigned partition's reading began (nothing read yet)

    # -- reads (any thread) --------------------------------------------------------------------------

    def owns(self, partition: int) -> bool:
        return partition in self._stores

    def partition_of(self, message_id: str) -> int:
        return partition_of(message_id, self.partitions)

    def raw_row(self, message_id: str) -> bytes | None:
        """The row's JSON when this worker owns its partition (None when unknown there)."""
        store = self._stores.get(self.partition_of(message_id)) if self.partitions else None
        return store.get_raw(message_id) if store is not None else None

    def row(self, message_id: str) -> StatusRow | None:
        raw = self.raw_row(message_id)
        return StatusRow.model_validate_json(raw) if raw is not None else None

    def trace(self, trace_id: str) -> list[tuple[int, str]]:
        """(first seen at, message_id) of the trace's rows in the partitions this worker owns."""
        return [hit for store in list(self._stores.values()) for hit in store.trace(trace_id)]

    def tenant_tasks(self, tenant: str) -> list[tenants.Hit]:
        """The newest tasks of `tenant` (at most tenants.MAX_SCAN per partition) in the partitions this worker owns."""
        return [tenants.hit(tenant, key, value) for store in list(self._stores.values())
                for key, value in store.newest(tenants.prefix(tenant), tenants.MAX_SCAN)]

    def due_rows(self, now_ms: int) -> list[StatusRow]:
        """Open rows whose deadline or delivery timeout has come and that the fold has read past (read from the due
        index, no scan): a row due at t is returned once every receipt appended to its partition before t is folded
        (`frontier`), so a STARTED or COMPLETED still unread cannot leave it looking open."""
        found = []
        for partition, store in list(self._stores.items()):
            for _, mid in store.timed(keys.DUE, min(now_ms, self.frontier.get(partition, 0))):
                raw = store.get_raw(mid)
                if raw is not None:
                    found.append(StatusRow.model_validate_json(raw))
        return found

    def no_route_rows(self, until_ms: int) -> list[StatusRow]:
        """NO_ROUTE dead letters that turned terminal at or before `until_ms` (for the stale gauge)."""
        found = []
        for store in list(self._stores.values()):
            for mid in store.no_route(until_ms):
                raw = store.get_raw(mid)
                if raw is not None:
                    found.append(StatusRow.model_validate_json(raw))
        return found

    def table_size(self) -> int:
        return sum(store.rows for store in list(self._stores.values()))

    # -- the loop ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        self._ledger = CommitLedger()
        consumer = clients.consumer(fold_group(self.names), self._kafka, profile="feed", **{
            "client.id": OWNER_PREFIX + self.url, "session.timeout.ms": 6_000, "heartbeat.interval.ms": 1_500,
            "partition.assignment.strategy": "roundrobin", "max.poll.interval.ms": 600_000,
            "on_commit": functools.partial(clients.on_commit, self._ledger),
        })
        producer = clients.producer(self._kafka, profile="hot",
                                    **{"topic.metadata.propagation.max.ms": delivery.PROPAGATION_MS})
        try:
            meta = consumer.list_topics(self.names.receipts, timeout=15).topics.get(self.names.receipts)
            if meta is None or meta.error is not None or not meta.partitions:
                raise StreamsError(f"topic {self.names.receipts} is missing; run `reach topics apply`")
            self.partitions = len(meta.partitions)
            consumer.subscribe([self.names.receipts], on_assign=self._assigned, on_revoke=self._revoked,
                               on_lost=self._lost)
            self._mark_ready()
            outage = 0.2
            while not self._stop.is_set():
                messages = clients.take(consumer, self._batch_size, 0.2)
                read_at, level = now_ms(), self._level(consumer)  # right after the drain: what this batch reaches
                if messages:
                    try:
                        self._batch(consumer, producer, messages)
                        outage = 0.2
                    except RegistryUnavailable as exc:  # the batch was rewound: read it again after a pause
                        log.warning("status fold: schema registry unavailable, reading again in %.1fs: %s",
                                    outage, exc)
                        level = []  # nothing of it was folded
                        self._stop.wait(outage)
                        outage = min(outage * 2, 5.0)
                if not messages:
                    clients.send_commits(consumer, self._ledger, self._owned())  # a failed last commit is sent again
                for partition in level:
                    self.frontier[partition] = max(self.frontier.get(partition, 0), read_at - FRONTIER_SLACK_MS)
                if time.monotonic() >= self._next_sweep:
                    self._next_sweep = time.monotonic() + self._sweep_every
                    self._sweep(producer)
        finally:
            producer.flush(10)
            clients.commit_now(consumer, self._ledger)
            consumer.close()
            self._close_stores(list(self._stores))

    def _batch(self, consumer: Consumer, producer: Producer, messages: list[Message]) -> None:
        rows: dict[str, tuple[int, Row]] = {}
        stored: dict[str, Row | None] = {}  # each row read, as its store holds it (for the store's index bookkeeping)
        replies: list[_Reply] = []
        callbacks: list[_Out] = []
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("receipts consumer: %s", err)
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            first.setdefault(partition, offset)
            last[partition] = offset
            try:
                self._one(msg, partition, rows, stored, replies, callbacks, producer)
            except RegistryUnavailable:  # infrastructure, not this receipt: commit nothing, read it all again
                self._rewind(consumer, _first_offsets(messages))
                raise
            except (BufferError, KafkaException, StreamsError):
                raise  # infrastructure, or a receipt of a partition this worker has no store for: nothing commits
            except Exception:  # noqa: BLE001 - one bad receipt must not stop the fold
                self._metrics.undecodable.inc()
                log.exception("status: could not fold the receipt at %s[%d]@%d; skipped", msg.topic(), partition,
                              offset)
        errors = self._send_replies(producer, replies) + self._send_callbacks(producer, callbacks)
        if errors:
            self._rewind(consumer, first)
            raise DeliveryFailed("replies not acknowledged: " + "; ".join(sorted(set(errors))[:3]))
        delivered: dict[int, int] = {}
        errors = []
        report = _tracker(delivered, errors)
        by_partition: dict[int, dict[str, bytes | None]] = {}
        for mid, (partition, row) in rows.items():
            value = by_partition.setdefault(partition, {})[mid] = orjson.dumps(row)
            producer.produce(self.names.status, key=mid.encode(), value=value, partition=partition,
                             on_delivery=report)
        self._flush(producer, errors)
        if errors:
            self._rewind(consumer, first)
            raise DeliveryFailed("; ".join(sorted(set(errors))[:3]))
        for partition, changes in by_partition.items():
            self._stores[partition].write(changes, changelog_next=delivered.get(partition),
                                          parsed={mid: (stored[mid], rows[mid][1]) for mid in changes})
        self._ledger.want({(self.names.receipts, p): o + 1 for p, o in last.items()})
        clients.send_commits(consumer, self._ledger, self._owned())

    def _one(self, msg: Message, partition: int, rows: dict[str, tuple[int, Row]], stored: dict[str, Row | None],
             replies: list[_Reply], callbacks: list[_Out], producer: Producer) -> None:
        value = msg.value()
        if value is None:
            return
        try:
            receipt = receiptbytes.decode_receipt(value)  # the schema checks its types: no model on this path
        except DecodeError as exc:
            self._metrics.undecodable.inc()
            log.warning("status: skipped an undecodable receipt (%s)", exc)
            return
        mid = receipt["message_id"]
        if mid in rows:
            current: Row | None = rows[mid][1]
        else:
            if mid not in stored:
                store = self._stores.get(partition)
                if store is None:
                    raise StreamsError(f"receipts partition {partition} is not assigned to this worker")
                raw = store.get_raw(mid)
                stored[mid] = orjson.loads(raw) if raw is not None else None
            current = lifecycle.current(stored[mid])  # a row an older version wrote is validated into this shape
        position = (msg.topic() or "", partition, msg.offset() or 0)
        parent, mark, asked = _header(msg, H.FANOUT_OF), _header(msg, H.FALLBACK), _header(msg, H.FALLBACK_ASK)
        if receipt["status"] == "FANNED_OUT" and (forged := _forged(current, receipt)) is not None:
            log.warning("status: dropped a FANNED_OUT receipt for %s: %s", mid, forged)
            return
        after, reply = lifecycle.apply(current, receipt, value, reply_to=self._reply_to(msg))
        if parent is not None or mark is not None or asked is not None or self._bookkeeps(after):
            settled = self._settle(position, current, after, receipt, callbacks, producer, parent=parent, mark=mark,
                                   asked=asked)
            if settled is None:
                return
            after = settled
        changed = after is not current and after != current
        self._metrics.observe_row(receipt, current, after, changed=changed)
        if changed:
            rows[mid] = (partition, after)
        if reply is not None and after["reply_to"]:
            replies.append((position, after["reply_to"], mid, reply, _child_mark(after)))

    def _bookkeeps(self, row: Row) -> bool:
        """Whether the row has fallback, fan-out or callback bookkeeping to settle (through the models, `_settle`):
        a callback spec, a fan-out, a fallback to send or waiting, or an ending its capability's fallback serves."""
        return (row["callback"] is not None or row["fanout"] is not None or row["fallback_pending"]
                or (row["status"] in _TERMINAL and row["fallback"] is None
                    and self._fallbacks.fallback_of(row["capability"]) is not None))

    def _settle(self, position: Position, current: Row | None, folded: Row, receipt: dict[str, Any],
                callbacks: list[_Out], producer: Producer, *, parent: str | None, mark: str | None,
                asked: str | None) -> Row | None:
        """The folded row with its fallback, fan-out and callback bookkeeping (reach.core.fallback, fanout, the
        Callbacks port, on the models); the records that produces join `callbacks`. Returns `folded` itself when
        nothing changed, None when the receipt breaks the record's rules (skipped)."""
        try:
            model = Receipt.from_avro(receipt)
        except ValidationError as exc:
            self._metrics.undecodable.inc()
            log.warning("status: skipped a receipt that breaks the record's rules (%s)", exc)
            return None
        before = StatusRow.model_validate(current) if current is not None else None
        start = StatusRow.model_validate(folded)
        after = fallback.asked(before, start, model, ask=asked)  # timekeeper, delay tier
        after, ask = fallback.settle(before, after, model, routed_child=fallback.parse_mark(mark),
                                     fallback_of=self._fallbacks.fallback_of)
        if ask is not None:  # before the callback: a child that was sent carries it on
            after, child = self._fallback_child(producer, after, ask)
            if child is not None:
                callbacks.append((position, *child))
        after, told = fanout.settle(after, model, parent=parent)
        if told is not None:  # a delivery's ending to its parent, or a parent's ending (docs/decisions/0040)
            callbacks.append((position, self.names.receipts, told.message_id, codec.encode(told), told.message_id))
        after, callback = self._callbacks.settle(after, model, now=now_ms())
        if callback is not None:
            topic, key, record = self._callback_record(producer, callback)
            callbacks.append((position, topic, key, record, key))
        return folded if after is start or after == start else after.model_dump(mode="json")

    def _fallback_child(self, producer: Producer, row: StatusRow, ask: fallback.Ask) -> tuple[
            StatusRow, tuple[str, str, bytes, str] | None]:
        """The row naming the child (or why none was sent), and the child's (topic, key, value, message id)."""
        raw = self._fallbacks.envelope(ask.at)
        made: dict[str, Any] | fallback.NotSent
        try:
            envelope = decode_dict("Envelope", raw) if raw is not None else None
        except DecodeError as exc:
            envelope, made = None, fallback.NotSent(f"the envelope at {ask.at} does not decode: {exc}")
        else:
            made = fallback.NotSent(f"the envelope at {ask.at} is gone (retention)")
        if envelope is not None and envelope.get("message_id") != row.message_id:
            made = fallback.NotSent(f"the record at {ask.at} is not the envelope of {row.message_id}")
        elif envelope is not None:
            made = fallback.child(envelope, fallback=ask.capability, now=now_ms(), ended=row)
        topic = "" if isinstance(made, fallback.NotSent) else self.names.capability(ask.capability)
        if topic and not self._topic_exists(producer, topic):
            made = fallback.NotSent(f"topic {topic} does not exist (start an agent of {ask.capability})")
        row = fallback.sent(row, ask, made)
        if isinstance(made, fallback.NotSent):
            self._metrics.fallbacks.labels("not_sent").inc()
            log.warning("status: no fallback for %s: %s", row.message_id, made.reason)
            return row, None
        self._metrics.fallbacks.labels("sent").inc()
        return row, (topic, fallback.key_of(made), encode_dict("Envelope", made), made["message_id"])

    def _callback_record(self, producer: Producer, callback: Envelope | Receipt) -> tuple[str, str, bytes]:
        """(topic, key, value): a callback envelope to its channel's capability topic (named by the catalog,
        never by the spec), else a receipt (the spec's rejection, or UNROUTABLE when no topic exists)."""
        if isinstance(callback, Envelope):
            topic = self.names.capability(callback.capability)
            if self._topic_exists(producer, topic):
                self._metrics.callbacks.labels("sent").inc()
                return topic, callback.message_id, codec.encode(callback)
            callback = self._callbacks.unroutable(callback, now=now_ms(), topic=topic)
            self._metrics.callbacks.labels("no_channel").inc()
            log.warning("status: no callback for %s: %s", callback.message_id, callback.error)
        else:
            self._metrics.callbacks.labels("rejected").inc()
        return self.names.receipts, callback.message_id, codec.encode(callback)

    def _send_callbacks(self, producer: Producer, callbacks: list[_Out]) -> list[str]:
        """Produce and flush the batch's callback records and fallback children; the errors (any: the batch is read
        again)."""
        if not callbacks:
            return []
        acks = Acks()
        for position, topic, key, value, message_id in callbacks:
            delivery.produce(producer, acks, position, topic, value, key=key.encode(),
                             headers=[(H.MESSAGE_ID, message_id.encode())])
        errors: list[str] = []
        self._flush(producer, errors)
        for position in acks.unacked():
            errors.append(", ".join(map(delivery.describe, acks.errors(position))) or "callback still queued")
        return errors

    def _reply_to(self, msg: Message) -> str | None:
        topic = _header(msg, H.REPLY_TO)
        if topic is None or topic in self._replies_family:
            return topic
        if self.names.family_of(topic) == "replies":
            if len(self._replies_family) > 10_000:
                self._replies_family.clear()
            self._replies_family.add(topic)
            return topic
        self._metrics.replies.labels("refused").inc()
        log.warning("status: refused reply_to %r (only %s.replies.* topics get replies)", topic[:200],
                    self.names.namespace)
        return None

    def _send_replies(self, producer: Producer, replies: list[_Reply]) -> list[str]:
        """Produce and flush the batch's replies; the errors that a read again may cure (empty: all settled).

        A refusal no retry cures (too large, the topic gone or forbidden, any synchronous produce error but
        a full queue) is counted as `failed` and logged: the row stays replied, the fold moves on."""
        if not replies:
            return []
        acks = Acks()
        queued = [(position, topic, mid) for position, topic, mid, value, child in replies
                  if self._reply(producer, acks, position, topic, mid, value, child)]
        errors: list[str] = []
        self._flush(producer, errors)
        unacked = set(acks.unacked())
        for position, topic, mid in queued:
            found = acks.errors(position)
            if position not in unacked:
                self._metrics.replies.labels("sent").inc()
            elif found and all(delivery.permanent(e) for e in found):
                self._refused(topic, mid, found[0])
            else:
                errors.append(", ".join(map(delivery.describe, found)) or "still queued")
        return errors

    def _reply(self, producer: Producer, acks: Acks, position: Position, topic: str, message_id: str,
               value: bytes, child: str | None = None) -> bool:
        """Queue one reply; False when it is settled already (no such topic, or refused at produce). A reply whose
        ending went on to a fallback names the child (`x-reach-fallback`), so a waiting caller follows the chain."""
        if not self._topic_exists(producer, topic):
            self._metrics.replies.labels("no_topic").inc()
            log.warning("status: no reply for %s: topic %s does not exist", message_id, topic)
            return False
        headers = [(H.FALLBACK, child.encode())] if child else None
        if delivery.produce(producer, acks, position, topic, value, key=message_id.encode(), headers=headers):
            return True
        error = acks.errors(position)[-1]
        if isinstance(error, BufferError):  # the local queue stayed full: an outage, the batch is read again
            return True
        self._refused(topic, message_id, error)  # about this record (too large, bad partition): never cured
        acks.reset(position)
        return False

    def _refused(self, topic: str, message_id: str, error: Any) -> None:
        self._metrics.replies.labels("failed").inc()
        log.warning("status: the reply for %s to %s was refused (%s); not retried", message_id, topic,
                    delivery.describe(error))

    def _topic_exists(self, producer: Producer, topic: str) -> bool:
        """False only when the broker answers UNKNOWN_TOPIC_OR_PART (never cached: a channel agent or caller
        may create the topic any moment); a hit is cached for a minute so a batch's replies cost no metadata
        round trip each. Any other metadata answer is infrastructure: StreamsError, nothing commits and the
        batch is read again (a broker hiccup must not turn a callback into a terminal UNROUTABLE)."""
        now = time.monotonic()
        seen = self._reply_topics.get(topic)
        if seen is not None and now - seen < 60:
            return True
        meta = producer.list_topics(topic, timeout=5).topics.get(topic)
        error = meta.error if meta is not None else None
        if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            self._reply_topics.pop(topic, None)
            return False
        if meta is None or error is not None or not meta.partitions:
            raise StreamsError(f"the metadata of topic {topic} is unavailable ({error or 'no partitions'}); "
                               "the batch is read again")
        if len(self._reply_topics) > 10_000:
            self._reply_topics.clear()
        self._reply_topics[topic] = now
        return True

    @staticmethod
    def _flush(producer: Producer, errors: list[str]) -> None:
        remaining = producer.flush(30)
        if remaining:
            errors.append(f"{remaining} records not acknowledged within 30s")

    def _rewind(self, consumer: Consumer, first: dict[int, int]) -> None:
        for partition, offset in first.items():
            consumer.seek(TopicPartition(self.names.receipts, partition, offset))

    # -- retention -----------------------------------------------------------------------------------

    def _sweep(self, producer: Producer) -> None:
        """Tombstone terminal rows older than the retention (read from the terminal index, oldest first)."""
        cutoff = int(time.time() * 1000) - self._retention_ms
        for partition, store in list(self._stores.items()):
            old = [mid for _, mid in store.timed(keys.TERMINAL, cutoff, limit=5_000)]
            if not old:
                continue
            delivered: dict[int, int] = {}
            errors: list[str] = []
            report = _tracker(delivered, errors)
            for mid in old:
                producer.produce(self.names.status, key=mid.encode(), value=None, partition=partition,
                                 on_delivery=report)
            self._flush(producer, errors)
            if errors:
                log.warning("status: retention tombstones refused (%s); trying again next sweep", errors[0])
                return
            store.write(dict.fromkeys(old), changelog_next=delivered.get(partition))

    # -- rebalance -----------------------------------------------------------------------------------

    def _level(self, consumer: Consumer) -> list[int]:
        """Owned partitions read up to the high watermark of their last fetch response (local calls, no round trip):
        every receipt appended there up to that fetch has been handed to this fold."""
        level = []
        tps = [TopicPartition(self.names.receipts, p) for p in self._stores]
        for tp in consumer.position(tps) if tps else []:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            position = tp.offset if tp.offset >= 0 else self._start_offsets.get(tp.partition, -1)
            if 0 <= high <= position:
                level.append(tp.partition)
        return level

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._note_starts(consumer, partitions)
        for tp in partitions:
            if tp.partition in self._stores:
                continue  # still open: this worker wrote everything since (an eager rebalance gave it back)
            started = time.monotonic()
            store, applied = self._recover(tp.partition)
            self._stores[tp.partition] = store
            log.info("status partition %d ready: %d rows, %d changelog records applied in %.2fs", tp.partition,
                     store.rows, applied, time.monotonic() - started)

    def _note_starts(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Where reading begins (the committed offset, else the log start): a partition with nothing new to read
        has no position, yet it is level once that start is its high watermark."""
        for tp in partitions:
            self.frontier.pop(tp.partition, None)
        try:
            committed = consumer.committed([TopicPartition(self.names.receipts, tp.partition) for tp in partitions],
                                           timeout=10)
            for tp in committed:
                low = tp.offset if tp.offset >= 0 else _watermarks(consumer, TopicPartition(tp.topic, tp.partition))[0]
                self._start_offsets[tp.partition] = low
        except KafkaException as exc:  # unknown starts: those partitions are level once something is read
            log.warning("status fold: committed offsets not read (%s); the timekeeper waits for the next receipt "
                        "of those partitions", exc)

    def _owned(self) -> list[tuple[str, int]]:
        """The receipts partitions this worker holds: those it has a store open for."""
        return [(self.names.receipts, p) for p in self._stores]

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        clients.commit_now(consumer, self._ledger, [(tp.topic, tp.partition) for tp in partitions])
        self._lost(consumer, partitions)

    def _lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._ledger.forget((tp.topic, tp.partition) for tp in partitions)
        self._close_stores([tp.partition for tp in partitions])

    def _close_stores(self, partitions: list[int]) -> None:
        for partition in partitions:
            self.frontier.pop(partition, None)
            self._start_offsets.pop(partition, None)
            store = self._stores.pop(partition, None)
            if store is not None:
                store.close()

    def _recover(self, partition: int) -> tuple[PartitionStore, int]:
        """The partition's store, current with the changelog: trusted, caught up, or rebuilt."""
        path = self._dir / f"p{partition}"
        store = PartitionStore(path)
        reader = topicreader.open_reader("status-recovery", self._kafka)
        try:
            low, high = _watermarks(reader, TopicPartition(self.names.status, partition))
            start = store.changelog_next
            if start is None or start < low or start > high:  # never recovered, compacted past, or a new topic
                store.destroy()
                store = PartitionStore(path)
                start = low
            applied = 0
            pending: dict[str, bytes | None] = {}
            for msg in topicreader.read_range(reader, self.names.status, {partition: start}, idle_timeout=15):
                pending[(msg.key() or b"").decode(errors="replace")] = msg.value()
                applied += 1
                if len(pending) >= _RECOVERY_BATCH:
                    store.write(pending, changelog_next=(msg.offset() or 0) + 1)
                    pending = {}
            store.write(pending, changelog_next=high)
            return store, applied
        except BaseException:
            store.close()  # RocksDB locks its directory: the next attempt must be able to open it again
            raise
        finally:
            reader.close()


def _watermarks(reader: Consumer, tp: TopicPartition, attempts: int = 25) -> tuple[int, int]:
    """The changelog partition's offsets; a leader still moving (right after topic creation) is waited out
    here, inside the assignment, instead of restarting the whole consumer and its rebalance."""
    for attempt in range(attempts):
        try:
            low, high = reader.get_watermark_offsets(tp, timeout=15)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0]
            if attempt == attempts - 1 or not (err.retriable() or err.code() in _LEADER_MOVING):
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def _header(msg: Message, name: str) -> str | None:
    pairs: Any = msg.headers() or ()
    for key, value in pairs:
        if key == name and value:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def _child_mark(row: Row) -> str | None:
    """The fallback child a row's ending went on to (`<capability> <child id>`), None when none was sent."""
    ref = row.get("fallback") or {}
    if not ref.get("message_id"):
        return None
    return fallback.mark(FallbackRef(capability=ref["capability"], message_id=ref["message_id"]))


def _forged(current: Row | None, receipt: dict[str, Any]) -> str | None:
    """Why a FANNED_OUT receipt is not folded (reach.core.fanout.foreign), None when it is; a receipt that breaks the
    record's rules says so too."""
    try:
        model = Receipt.from_avro(receipt)
    except ValidationError as exc:
        return f"it breaks the record's rules ({exc})"
    return fanout.foreign(StatusRow.model_validate(current) if current is not None else None, model)


def _first_offsets(messages: list[Message]) -> dict[int, int]:
    """Per partition, the offset of the batch's first record there (where a rewound batch reads again)."""
    first: dict[int, int] = {}
    for msg in messages:
        if msg.error() is None:
            first.setdefault(msg.partition() or 0, msg.offset() or 0)
    return first


def _tracker(delivered: dict[int, int], errors: list[str]) -> Callable[[Any, Message], None]:
    """A delivery report that records the highest acknowledged offset per partition, or the error."""
    def report(err: Any, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            partition, offset = msg.partition() or 0, msg.offset() or 0
            delivered[partition] = max(delivered.get(partition, -1), offset + 1)
    return report
