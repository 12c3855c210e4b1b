"""The status fold sends an agent's ending to its capability's fallback, on fakes: the envelope read back from the
inbox, the child produced inside the batch before the commit, once per message and generation; the callback goes
with the child."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from reach.channels.closure import ChannelCallbacks
from reach.channels.spec import callback_text
from reach.core.lifecycle import FallbackRef
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.kafka import headers as H
from reach.metrics import Metrics
from reach.records import Decision, Envelope, ErrorInfo, Receipt, Status
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError
from reach.streams.status.fold import StatusFold
from reach.streams.status.store import PartitionStore
from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, fold_batch
from tests.unit.streams.test_status_fold_callbacks import NAMES, OWNED, WEBHOOK, Producer

SPEC = callback_text("webhook:https://example.com/hook", "$.a")
INBOX = (NAMES.inbox("agent://demo/flaky"), 0, 7)
ECHO = NAMES.capability("demo.echo")
ENVELOPE = new_envelope("demo.flaky", {"x": 1}, callback=SPEC).model_copy(update={"deadline": 10**13})  # never spent
MID = ENVELOPE.message_id


class Fallbacks:
    """The port in memory: demo.flaky falls back to demo.echo; the inbox holds ENVELOPE (or nothing: `gone`)."""

    def __init__(self, *, gone: bool = False, pending: bool = False) -> None:
        self.gone, self.pending, self.reads = gone, pending, 0

    def fallback_of(self, capability: str) -> str | None:
        return "demo.echo" if capability == "demo.flaky" else None

    def envelope(self, at: tuple[str, int, int]) -> bytes | None:
        self.reads += 1
        assert at == INBOX
        if self.pending:
            raise StreamsError("not read in time")
        return None if self.gone else codec.encode(ENVELOPE)


def status_fold(tmp_path: Path, port: Fallbacks) -> StatusFold:
    fold = StatusFold(names=NAMES, kafka=KafkaSettings(), metrics=Metrics(), state_dir=tmp_path, url="http://w1",
                      retention_ms=60_000, callbacks=ChannelCallbacks(), fallbacks=port)
    fold.partitions = 1
    fold._stores[0] = PartitionStore(tmp_path / "p0")
    return fold


def receipt(offset: int, status: Status, headers: list[Any] | None = None, **kw: Any) -> FakeMessage:
    value = codec.encode(Receipt(message_id=MID, trace_id=ENVELOPE.trace_id, tenant="default", capability="demo.flaky",
                                 status=status, at=1_000 + offset, callback=SPEC, **kw))
    return FakeMessage(NAMES.receipts, 0, offset, value, MID.encode(), headers or [])


AGENT = dict(agent_id="agent://demo/flaky", instance_id="i1")
FAILED = dict(AGENT, error=ErrorInfo(kind="HANDLER", code="BOOM", message="always fails"))
RUN = [receipt(0, Status.ROUTED, instance_id="i1", decision=Decision(topic=INBOX[0], partition=0, offset=7)),
       receipt(1, Status.STARTED, **AGENT), receipt(2, Status.DEAD_LETTERED, **FAILED)]


def test_an_agents_ending_goes_to_the_fallback_with_the_callback_before_the_commit(tmp_path: Path) -> None:
    port = Fallbacks()
    fold, consumer, producer = status_fold(tmp_path, port), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, RUN))
    [child] = [codec.decode(v, Envelope) for v in producer.to(ECHO)]
    assert (child.message_id, child.parent_id, child.capability, child.payload, child.callback) == (
        f"{MID}-fb0", MID, "demo.echo", ENVELOPE.payload, SPEC)
    assert producer.to(WEBHOOK) == [], "the child carries the callback: the parent sends none"
    row = fold.row(MID)
    assert row is not None and row.status is Status.DEAD_LETTERED and row.callback_sent
    assert row.fallback == FallbackRef(capability="demo.echo", message_id=f"{MID}-fb0")
    assert consumer.committed_at() == {(NAMES.receipts, 0): 3}
    assert fold._metrics.registry.get_sample_value("agentreach_fallbacks_total", {"outcome": "sent"}) == 1

    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, [receipt(3, Status.DEAD_LETTERED, **FAILED),
                                                                     receipt(4, Status.FAILED, **FAILED)]))
    assert len(producer.to(ECHO)) == 1 and port.reads == 1, "a replayed or later ending sends no second child"


def test_an_envelope_not_readable_now_commits_nothing(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path, Fallbacks(pending=True)), FakeConsumer(assigned=OWNED), Producer()
    with pytest.raises(StreamsError):
        fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, RUN))
    assert consumer.commits == [] and producer.sent == [] and fold.row(MID) is None


def test_a_gone_envelope_names_why_and_the_message_calls_back_itself(tmp_path: Path) -> None:
    fold, consumer, producer = status_fold(tmp_path, Fallbacks(gone=True)), FakeConsumer(assigned=OWNED), Producer()
    fold_batch(fold, cast(Any, consumer), cast(Any, producer), cast(Any, RUN))
    row = fold.row(MID)
    assert row is not None and row.fallback is not None and row.fallback.message_id is None
    assert "gone" in (row.fallback.note or "")
    assert producer.to(ECHO) == [] and len(producer.to(WEBHOOK)) == 1


def test_a_fallback_without_a_topic_is_not_sent(tmp_path: Path) -> None:
    fold, producer = status_fold(tmp_path, Fallbacks()), Producer(known={WEBHOOK})
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer), cast(Any, RUN))
    row = fold.row(MID)
    assert row is not None and row.fallback is not None and "does not exist" in (row.fallback.note or "")
    assert producer.to(ECHO) == [] and len(producer.to(WEBHOOK)) == 1


def test_the_routers_child_is_recorded_and_nothing_is_read(tmp_path: Path) -> None:
    port = Fallbacks()
    fold, producer = status_fold(tmp_path, port), Producer()
    mark = [(H.FALLBACK, f"demo.echo {MID}-fb0".encode())]
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer),
                cast(Any, [receipt(0, Status.UNROUTABLE, headers=mark)]))
    row = fold.row(MID)
    assert row is not None and row.fallback == FallbackRef(capability="demo.echo", message_id=f"{MID}-fb0")
    assert port.reads == 0 and producer.to(ECHO) == [] and producer.to(WEBHOOK) == []


ROUTED = receipt(0, Status.ROUTED, instance_id="i1", decision=Decision(topic=INBOX[0], partition=0, offset=7))
LATE = ErrorInfo(kind="DELIVERY", code="RETRIES_EXHAUSTED", message="3 of 3 attempts failed; last: DELIVERY_TIMEOUT")


@pytest.mark.parametrize("ender", [b"timekeeper", b"delays"])
def test_a_timekeeper_or_delay_tier_ending_that_asks_goes_to_the_fallback_once(tmp_path: Path, ender: bytes) -> None:
    port = Fallbacks()
    fold, consumer, producer = status_fold(tmp_path, port), FakeConsumer(assigned=OWNED), Producer()
    ask = [(H.FALLBACK_ASK, ender)]
    fold_batch(fold, cast(Any, consumer), cast(Any, producer),
                cast(Any, [ROUTED, receipt(1, Status.DEAD_LETTERED, headers=ask, error=LATE)]))
    [child] = [codec.decode(v, Envelope) for v in producer.to(ECHO)]
    assert (child.message_id, child.parent_id, child.trace_id) == (f"{MID}-fb0", MID, ENVELOPE.trace_id)
    row = fold.row(MID)
    assert row is not None and row.fallback == FallbackRef(capability="demo.echo", message_id=f"{MID}-fb0")
    assert not row.fallback_pending and producer.to(WEBHOOK) == [], "the child carries the callback"
    fold_batch(fold, cast(Any, consumer), cast(Any, producer),
                cast(Any, [receipt(2, Status.DEAD_LETTERED, headers=ask, error=LATE)]))
    assert len(producer.to(ECHO)) == 1 and port.reads == 1, "a repeated ending asks no second child"


def test_an_unmarked_ending_without_an_agent_sends_no_child_as_before(tmp_path: Path) -> None:
    port = Fallbacks()
    fold, producer = status_fold(tmp_path, port), Producer()
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer),
                cast(Any, [ROUTED, receipt(1, Status.DEAD_LETTERED, error=LATE)]))
    row = fold.row(MID)
    assert row is not None and row.fallback is None and port.reads == 0 and producer.to(ECHO) == []
    assert len(producer.to(WEBHOOK)) == 1, "the parent calls back itself"


def test_an_asking_ending_of_a_message_never_forwarded_does_not_wait_for_an_envelope(tmp_path: Path) -> None:
    port = Fallbacks()
    fold, producer = status_fold(tmp_path, port), Producer()
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer), cast(Any, [
        receipt(0, Status.FAILED, headers=[(H.FALLBACK_ASK, b"timekeeper")],
                error=ErrorInfo(kind="DELIVERY", code="ENVELOPE_GONE", message="gone"))]))
    row = fold.row(MID)
    assert row is not None and not row.fallback_pending and row.fallback is None and port.reads == 0
    assert len(producer.to(WEBHOOK)) == 1, "no wait: the parent's callback goes at once"


def test_the_reply_of_an_ending_that_went_to_the_fallback_names_the_child(tmp_path: Path) -> None:
    fold, producer = status_fold(tmp_path, Fallbacks()), Producer()
    reply_to = NAMES.replies("c1")
    marked = [(H.FALLBACK, f"demo.echo {MID}-fb0".encode()), (H.REPLY_TO, reply_to.encode())]
    fold_batch(fold, cast(Any, FakeConsumer(assigned=OWNED)), cast(Any, producer),
               cast(Any, [receipt(0, Status.UNROUTABLE, headers=marked)]))
    [(topic, headers)] = [(t, hs) for t, hs in producer.sent_headers if t == reply_to]
    assert (H.FALLBACK, f"demo.echo {MID}-fb0".encode()) in headers
    assert [codec.decode(v, Receipt).status for t, v, _ in producer.sent if t == reply_to] == [Status.UNROUTABLE]
