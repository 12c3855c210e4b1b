"""The status fold: a batch worker (reach.kafka.worker) over `<ns>.receipts` writing rows, changelog and replies.

Per batch: decode each receipt, fold it (pure `reach.core.lifecycle.apply`, on dicts) onto the row
as it stands in this batch; produce each reply to its `<ns>.replies.*` topic; then, in a later produce phase
(decision 0063), one changelog record per changed row to the status partition of the same number; only when
the broker acknowledged them (`acknowledged`) write the rows to the partition stores (RocksDB); the worker commits
the receipts offsets only past what all of it acknowledged. Replies and callbacks (a terminal row's callback
envelope to its channel capability, see reach.channels.closure) go in the first phase so no changelog record says
`replied` / `callback_sent` before the broker acknowledged them; so does a fallback child (an agent's ending its
capability's POLICY `fallback` serves, reach.core.fallback: the envelope is read back from the inbox through the
Fallbacks port), before a changelog record names it. An unacknowledged record reads its receipts partition again
from the batch's first receipt there (at least once; the fold is idempotent), except a reply no retry cures (too
large, topic gone), which is counted and logged. A registry outage holds the partition (read again after a pause).
On assignment a partition's store is trusted when it has applied the changelog up to its end, else
caught up from the offset it recorded (or rebuilt from the start when that offset is gone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from reach.core import fallback, fanout, lifecycle
from reach.core.lifecycle import FallbackRef, Row, StatusRow
from reach.envelopes import now_ms
from reach.kafka import clients, codec, delivery, receiptbytes, topicreader
from reach.kafka import headers as H
from reach.kafka.acks import Position
from reach.kafka.backoff import PartitionBackoff
from reach.kafka.clients import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from reach.kafka.codec import DecodeError, RegistryUnavailable, decode_dict, encode_dict
from reach.kafka.worker import (
    INFRASTRUCTURE,
    Delivered,
    Hold,
    Output,
    Record,
    Refused,
    Subscription,
    TopicPart,
    Worker,
)
from reach.metrics import Metrics
from reach.names import Names
from reach.records import Envelope, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError
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
COMMIT_EVERY_S = 0.1
"""How often the fold's commits may go out (reach.core.commits): at most every 100 ms, one in flight, as the router
(decision 0070). Safe by construction: a receipt's rows are in the store before its offset is even wanted
(`acknowledged`), so a receipt read again after a crash folds into a row that already holds it (no change, no
reply, no record)."""
_LEADER_MOVING = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT})


def fold_group(names: Names) -> str:
    """The fold's consumer group; its members' client ids carry their HTTP address (routed lookups)."""
    return f"{names.router_app_id}.status"


class StatusFold(Worker[bytes]):
    """The status table's only writer; readers (views, timekeeper, gauges) use `row`, `due_rows`, ... ."""

    thread_name = "reach-status-fold"
    label = "status fold"
    restart_on = (*INFRASTRUCTURE, StreamsError)  # a fresh consumer resumes from the committed offsets
    stop_timeout_s = 15.0
    log = log

    def __init__(self, *, names: Names, kafka: KafkaSettings, metrics: Metrics, state_dir: Path, url: str,
                 retention_ms: int, callbacks: Callbacks, fallbacks: Fallbacks | None = None,
                 batch_size: int = 1_000) -> None:
        super().__init__(kafka=kafka, subscription=Subscription(
            group=fold_group(names), topics=[names.receipts], profile="feed", producer_profile="hot",
            max_records=batch_size, poll_s=0.2, commit_every_s=COMMIT_EVERY_S,
            consumer_config={"client.id": OWNER_PREFIX + url, "session.timeout.ms": 6_000,
                             "heartbeat.interval.ms": 1_500, "partition.assignment.strategy": "roundrobin",
                             "max.poll.interval.ms": 600_000},
            producer_config={"topic.metadata.propagation.max.ms": delivery.PROPAGATION_MS}))
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
        self._admin: Any = None  # metadata lookups of reply and callback topics (never creating them)
        self._outage_s = 0.0  # how long a partition waits after the registry failed (doubling)
        self._changelog: dict[int, int] = {}  # this batch's changelog records per status partition
        self._changes: dict[int, dict[str, bytes | None]] = {}  # and their values, written once acknowledged
        self._parsed: dict[str, tuple[Row | None, Row]] = {}
        self._replies: set[int] = set()  # ids of this batch's reply outputs (counted `sent` once acknowledged)
        self._held: set[int] = set()  # receipts partitions this batch holds (the registry did not answer)
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

    def opened(self) -> None:
        assert self.consumer is not None
        self.partitions = len(topicreader.partitions(self.consumer, self.names.receipts, timeout=15))
        self._admin = clients.admin(self._kafka, **{"allow.auto.create.topics": False})

    def closed(self) -> None:
        self._close_stores(list(self._stores))

    def process(self, messages: list[Message], *, consumer: Consumer, producer: Producer,
                backoff: PartitionBackoff | None = None, owed: Sequence[Output] = ()) -> dict[TopicPart, int]:
        """The worker's batch, and the frontier of what it folded: right after the drain, what this batch reaches."""
        read_at, level = now_ms(), self._level(consumer)
        self._held = set()
        last: dict[int, int] = {}
        for msg in messages:
            if msg.error() is None:
                last[msg.partition() or 0] = msg.offset() or 0
        commits = super().process(messages, consumer=consumer, producer=producer, backoff=backoff, owed=owed)
        # a partition read again (held, or an output not acknowledged) has not folded what it read
        self._advance(read_at, [p for p in level if p not in last
                                or commits.get((self.names.receipts, p), -1) > last[p]])
        return commits

    def idle(self) -> list[Output]:
        if self.consumer is not None:
            self._advance(now_ms(), self._level(self.consumer))
        return self._sweep()

    def _advance(self, read_at: int, level: list[int]) -> None:
        for partition in level:
            self.frontier[partition] = max(self.frontier.get(partition, 0), read_at - FRONTIER_SLACK_MS)

    def handle(self, records: list[Record[bytes]]) -> list[Output | Hold]:
        rows: dict[str, tuple[int, Row]] = {}
        stored: dict[str, Row | None] = {}  # each row read, as its store holds it (for the store's index bookkeeping)
        outputs: list[Output | Hold] = []
        first: dict[int, Position] = {}
        self._replies = set()
        for record in records:
            partition = record.partition
            if partition in self._held:
                continue  # read again from the held receipt, in order
            first.setdefault(partition, record.position)
            try:
                self._one(record, partition, rows, stored, outputs)
            except RegistryUnavailable as exc:  # infrastructure, not this receipt: hold its partition from it
                self._outage_s = min(max(self._outage_s * 2, 0.2), 5.0)
                log.warning("status fold: schema registry unavailable, reading receipts[%d] again in %.1fs: %s",
                            partition, self._outage_s, exc)
                outputs.append(Hold(record.position, self._outage_s))
                self._held.add(partition)
            except (BufferError, KafkaException, StreamsError):
                raise  # infrastructure, or a receipt of a partition this worker has no store for: nothing commits
            except Exception:  # noqa: BLE001 - one bad receipt must not stop the fold
                self._metrics.undecodable.inc()
                log.exception("status: could not fold the receipt at %s[%d]@%d; skipped", *record.position)
        if not self._held:
            self._outage_s = 0.0
        self._changelog, self._changes = {}, {}
        self._parsed = {}
        for mid, (partition, row) in rows.items():  # a held partition's rows: what its receipts before the hold made
            value = self._changes.setdefault(partition, {})[mid] = orjson.dumps(row)
            self._parsed[mid] = (stored[mid], row)
            self._changelog[partition] = self._changelog.get(partition, 0) + 1
            outputs.append(Output(self.names.status, value, key=mid.encode(), partition=partition,
                                  cause=first[partition], phase=1))
        # retention runs under load too (idle() alone would never sweep a busy fold); a row this batch changed waits
        outputs += [o for o in self._sweep() if isinstance(o.key, bytes) and o.key.decode() not in rows]
        return outputs

    def acknowledged(self, delivered: list[Delivered]) -> None:
        """The rows of each status partition whose changelog records all landed go to its store, at the offset after
        them (a partition with one missing is read again and folded again from its store as it was)."""
        landed: dict[int, int] = {}
        at: dict[int, int] = {}
        for d in delivered:
            out = d.output
            if out.topic == self.names.status and out.cause != ():
                landed[d.partition] = landed.get(d.partition, 0) + 1
                at[d.partition] = max(at.get(d.partition, -1), d.offset + 1)
            elif id(out) in self._replies:
                self._metrics.replies.labels("sent").inc()
            elif out.topic == self.names.status:  # a retention tombstone (`_sweep`)
                self._swept(d.partition, out, d.offset)
        for partition, changes in self._changes.items():
            if landed.get(partition, 0) == self._changelog[partition]:
                self._stores[partition].write(changes, changelog_next=at[partition],
                                              parsed={mid: self._parsed[mid] for mid in changes})
        self._changes, self._changelog, self._parsed = {}, {}, {}

    def failed(self, record: Record[bytes], error: BaseException) -> list[Output]:
        """A receipt one of whose records the broker refused for good: a reply is counted and logged (the row stays
        replied, the fold moves on); a callback or a fallback child keeps its receipt unacknowledged (read again)."""
        if isinstance(error, Refused):
            log.warning("status: a record caused by %r was refused (%s); not retried", record,
                        ", ".join(map(delivery.describe, error.errors)))
            if H.text(record.headers, H.REPLY_TO) is not None:
                self._metrics.replies.labels("failed").inc()
            return []
        raise error

    def _one(self, msg: Record[bytes], partition: int, rows: dict[str, tuple[int, Row]],
             stored: dict[str, Row | None], outputs: list[Output | Hold]) -> None:
        value = msg.raw
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
        position = msg.position
        headers = msg.headers
        parent, mark = H.text(headers, H.FANOUT_OF), H.text(headers, H.FALLBACK)
        asked = H.text(headers, H.FALLBACK_ASK)
        if receipt["status"] == "FANNED_OUT" and (forged := _forged(current, receipt)) is not None:
            log.warning("status: dropped a FANNED_OUT receipt for %s: %s", mid, forged)
            return
        after, reply = lifecycle.apply(current, receipt, value, reply_to=self._reply_to(headers))
        if parent is not None or mark is not None or asked is not None or self._bookkeeps(after):
            settled = self._bookkeeping(position, current, after, receipt, outputs, parent=parent, mark=mark,
                                   asked=asked)
            if settled is None:
                return
            after = settled
        changed = after is not current and after != current
        self._metrics.observe_row(receipt, current, after, changed=changed)
        if changed:
            rows[mid] = (partition, after)
        if reply is not None and after["reply_to"]:
            self._reply(outputs, position, after["reply_to"], mid, reply, _child_mark(after))

    def _bookkeeps(self, row: Row) -> bool:
        """Whether the row has fallback, fan-out or callback bookkeeping to settle (through the models, `_bookkeeping`):
        a callback spec, a fan-out, a fallback to send or waiting, or an ending its capability's fallback serves."""
        return (row["callback"] is not None or row["fanout"] is not None or row["fallback_pending"]
                or (row["status"] in _TERMINAL and row["fallback"] is None
                    and self._fallbacks.fallback_of(row["capability"]) is not None))

    def _bookkeeping(self, position: Position, current: Row | None, folded: Row, receipt: dict[str, Any],
                outputs: list[Output | Hold], *, parent: str | None, mark: str | None,
                asked: str | None) -> Row | None:
        """The folded row with its fallback, fan-out and callback bookkeeping (reach.core.fallback, fanout, the
        Callbacks port, on the models); the records that produces join `outputs` (the first phase). Returns
        `folded` itself when nothing changed, None when the receipt breaks the record's rules (skipped)."""
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
            after, child = self._fallback_child(after, ask)
            if child is not None:
                outputs.append(_out(position, *child))
        after, told = fanout.settle(after, model, parent=parent)
        if told is not None:  # a delivery's ending to its parent, or a parent's ending (docs/decisions/0040)
            outputs.append(_out(position, self.names.receipts, told.message_id, codec.encode(told), told.message_id))
        after, callback = self._callbacks.settle(after, model, now=now_ms())
        if callback is not None:
            topic, key, record = self._callback_record(callback)
            outputs.append(_out(position, topic, key, record, key))
        return folded if after is start or after == start else after.model_dump(mode="json")

    def _fallback_child(self, row: StatusRow, ask: fallback.Ask) -> tuple[
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
        if topic and not self._topic_exists(topic):
            made = fallback.NotSent(f"topic {topic} does not exist (start an agent of {ask.capability})")
        row = fallback.sent(row, ask, made)
        if isinstance(made, fallback.NotSent):
            self._metrics.fallbacks.labels("not_sent").inc()
            log.warning("status: no fallback for %s: %s", row.message_id, made.reason)
            return row, None
        self._metrics.fallbacks.labels("sent").inc()
        return row, (topic, fallback.key_of(made), encode_dict("Envelope", made), made["message_id"])

    def _callback_record(self, callback: Envelope | Receipt) -> tuple[str, str, bytes]:
        """(topic, key, value): a callback envelope to its channel's capability topic (named by the catalog,
        never by the spec), else a receipt (the spec's rejection, or UNROUTABLE when no topic exists)."""
        if isinstance(callback, Envelope):
            topic = self.names.capability(callback.capability)
            if self._topic_exists(topic):
                self._metrics.callbacks.labels("sent").inc()
                return topic, callback.message_id, codec.encode(callback)
            callback = self._callbacks.unroutable(callback, now=now_ms(), topic=topic)
            self._metrics.callbacks.labels("no_channel").inc()
            log.warning("status: no callback for %s: %s", callback.message_id, callback.error)
        else:
            self._metrics.callbacks.labels("rejected").inc()
        return self.names.receipts, callback.message_id, codec.encode(callback)

    def _reply_to(self, headers: H.Pairs) -> str | None:
        topic = H.text(headers, H.REPLY_TO)
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

    def _reply(self, outputs: list[Output | Hold], position: Position, topic: str, message_id: str,
               value: bytes, child: str | None = None) -> None:
        """Queue one reply (the first phase), unless its topic does not exist (settled: counted and logged). A reply
        whose ending went on to a fallback names the child (`x-reach-fallback`), so a waiting caller follows the
        chain."""
        if not self._topic_exists(topic):
            self._metrics.replies.labels("no_topic").inc()
            log.warning("status: no reply for %s: topic %s does not exist", message_id, topic)
            return
        headers: H.Headers | None = [(H.FALLBACK, child.encode())] if child else None
        out = Output(topic, value, key=message_id.encode(), headers=headers, cause=position)
        self._replies.add(id(out))
        outputs.append(out)

    def _topic_exists(self, topic: str) -> bool:
        """False only when the broker answers UNKNOWN_TOPIC_OR_PART (never cached: a channel agent or caller
        may create the topic any moment); a hit is cached for a minute so a batch's replies cost no metadata
        round trip each. Any other metadata answer is infrastructure: StreamsError, nothing commits and the
        batch is read again (a broker hiccup must not turn a callback into a terminal UNROUTABLE)."""
        now = time.monotonic()
        seen = self._reply_topics.get(topic)
        if seen is not None and now - seen < 60:
            return True
        meta = self._admin.list_topics(topic, timeout=5).topics.get(topic)
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

    # -- retention -----------------------------------------------------------------------------------

    def _sweep(self) -> list[Output]:
        """Tombstones for terminal rows older than the retention (read from the terminal index, oldest first), at
        most every `_sweep_every`; the store forgets each row once its tombstone landed (`_swept`)."""
        if time.monotonic() < self._next_sweep:
            return []
        self._next_sweep = time.monotonic() + self._sweep_every
        cutoff = int(time.time() * 1000) - self._retention_ms
        return [Output(self.names.status, None, key=mid.encode(), partition=partition, cause=())
                for partition, store in list(self._stores.items())
                for _, mid in store.timed(keys.TERMINAL, cutoff, limit=5_000)]

    def _swept(self, partition: int, tombstone: Output, offset: int) -> None:
        store = self._stores.get(partition)
        if store is not None and isinstance(tombstone.key, bytes):
            store.write({tombstone.key.decode(): None}, changelog_next=offset + 1)

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

    def on_assigned(self, partitions: list[TopicPart]) -> None:
        assert self.consumer is not None
        self._note_starts(self.consumer, [TopicPartition(t, p) for t, p in partitions])
        for _topic, partition in partitions:
            if partition in self._stores:
                continue  # still open: this worker wrote everything since (an eager rebalance gave it back)
            started = time.monotonic()
            store, applied = self._recover(partition)
            self._stores[partition] = store
            log.info("status partition %d ready: %d rows, %d changelog records applied in %.2fs", partition,
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

    def on_lost(self, partitions: list[TopicPart]) -> None:
        self._close_stores([p for _t, p in partitions])

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


def _out(position: Position, topic: str, key: str, value: bytes, message_id: str) -> Output:
    """A callback or a fallback child of the receipt at `position` (the first phase)."""
    return Output(topic, value, key=key.encode(), headers=[(H.MESSAGE_ID, message_id.encode())], cause=position)


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
