"""The client SDK: build envelopes and publish them to capability topics, each one acknowledged by the broker.

`send` publishes one envelope and returns once the broker acknowledged it; `send_many` produces a batch and waits
once for all of its acknowledgements, reporting each envelope's outcome (decision 0057). reach.aioclient's
AsyncClient does the same on asyncio; `invoke` and its kin (reach.invoke) wait for the terminal reply."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, cast

from reach import invoke as invoke_
from reach import lineage, tracing
from reach.contractbook import ContractBook
from reach.controlfeed import ControlFeed, ControlSource
from reach.core.marks import kept
from reach.envelopes import BUDGET_MS, new_envelope, now_ms, policy_defaults, routing_key
from reach.errors import InfraUnavailable, ReachError
from reach.intent.catalog import RESERVED
from reach.invoke import ReplyInbox
from reach.kafka import avrogen, clients, codec, pipeline, topics, writeas
from reach.kafka import headers as h
from reach.names import Names
from reach.records import Envelope, Policy, Receipt
from reach.settings import KafkaSettings, ReachSettings

if TYPE_CHECKING:
    from reach.ops.turns import Answered

log = logging.getLogger("reach.client")
NO_POLICY = Policy()  # no control topic followed: the built-in timeouts and budget
CONTROL_RETRY_S = 30.0  # while the control topic cannot be read, built-in defaults apply; try again this often


SEND_TIMEOUT_S = 30.0  # how long a send waits for the broker's acknowledgements


class SendFailed(ReachError):
    """The broker did not acknowledge an envelope: `.message_id`, `.topic`, and librdkafka's `.code`."""

    def __init__(self, message: str, *, message_id: str, topic: str, code: str) -> None:
        super().__init__(message)
        self.message_id = message_id
        self.topic = topic
        self.code = code


class SendRefused(SendFailed):
    """The broker refused the envelope itself (too large for its topic, an unknown topic): nothing was written, and
    sending it again unchanged is refused again."""


class SendUnacknowledged(SendFailed, InfraUnavailable):
    """No acknowledgement came in time (broker down or unreachable): the broker may or may not have the envelope.
    Send it again with the same idempotency_key; agents run it once."""


@dataclass(frozen=True, slots=True)
class Request:
    """One envelope of a `send_many`: a capability, its payload and `Client.envelope`'s other fields."""

    capability: str
    payload: Any
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sent:
    """What became of one envelope of a `send_many` / `publish_many`: acknowledged when `error` is None."""

    message_id: str
    topic: str
    error: SendFailed | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def send_failure(message_id: str, failure: pipeline.ProduceError) -> SendFailed:
    """The SendFailed of an envelope the pipeline did not get acknowledged: refused, or unacknowledged."""
    cls = SendRefused if isinstance(failure, pipeline.Refused) else SendUnacknowledged
    hint = ("fix the envelope (a smaller payload, an existing topic: `reach topics apply`)"
            if cls is SendRefused else "send it again with the same idempotency_key")
    return cls(f"{message_id} was not sent: {failure}; {hint}", message_id=message_id, topic=failure.topic,
               code=failure.code)


class Client:
    """Publishes envelopes (murmur2-keyed by session_key or message_id) and waits for the broker's ack."""

    def __init__(self, *, kafka: KafkaSettings | None = None, settings: ReachSettings | None = None,
                 source: str = "reach-client", follow_control: bool = True,
                 control: ControlSource | None = None, follow_registry: bool = True) -> None:
        # the SDK's entry point for a caller's program: settings not given come from the environment here
        self.kafka = kafka or KafkaSettings()
        self.settings = settings or ReachSettings()
        codec.use_schema_registry(self.settings.schema_registry_url)
        writeas.use(self.settings.records_write_as)
        self.names = Names(self.settings.namespace)
        self.source = source
        self._producer: pipeline.Producing | None = None
        self._admin: Any = None
        self._topics: set[str] = set()
        self._follow_control = follow_control
        self._control: ControlSource | None = control  # given: already started by the caller
        self._control_lock = threading.Lock()
        self._control_retry_at = 0.0
        # the live contract versions: each envelope's schema_version (reach.contractbook); off: none is stamped
        self.contracts = ContractBook(names=self.names, kafka=self.kafka) if follow_registry else None

    def policy(self, capability: str) -> Policy:
        """The capability's control POLICY, from a follower of the control topic started on first use (one read
        of the topic, then tailed in the background; never a read per send). Built-in defaults while unreadable."""
        feed = self._control_feed()
        return feed.view.policy(capability) if feed is not None else NO_POLICY

    def envelope(self, capability: str, payload: Any, **fields: Any) -> Envelope:
        """A new envelope; inside an active span it joins that span's trace. Timeouts and budget the caller does
        not set come from the capability's POLICY, else the built-in defaults. Sent from a handler (the agent SDK's
        run), it is that message's child: its parent_id and trace, its deadline at the latest, and what is left of its
        `max_tokens` / `max_cost_micros` (docs/agents.md, Budgets down the chain). A `callback` (JSON or short form
        `webhook:URL`, with `callback_fields`: JSONPath strings) is checked here: a bad one raises BadCallback."""
        return self._envelope(capability, payload, fields, policy_defaults(self.policy(capability)))

    def _envelope(self, capability: str, payload: Any, fields: dict[str, Any], defaults: dict[str, int]) -> Envelope:
        """`envelope` with the capability's POLICY defaults given (a batch reads them once per capability)."""
        callback, callback_fields = fields.pop("callback", None), fields.pop("callback_fields", None)
        if callback is not None or callback_fields:
            from reach.channels.spec import callback_text

            fields["callback"] = callback_text(callback, callback_fields)
        for name, value in defaults.items():
            fields.setdefault(name, value)
        fields.setdefault("source", self.source)
        if self.contracts is not None and capability != RESERVED and "schema_version" not in fields:
            fields["schema_version"] = self.contracts.version_for(
                capability, fields.get("version", "*"), fields.get("tenant", "default"), payload)
        run = lineage.current()
        if run is not None:  # sent from a handler: a child of its message, within what is left of its budget
            return run.child(fields, lambda f: new_envelope(capability, payload, **f), now_ms=now_ms(),
                             default_budget_ms=BUDGET_MS)
        if fields.get("trace_id") is None:
            fields["trace_id"] = tracing.current_trace_id()
        return new_envelope(capability, payload, **fields)

    def send(self, capability: str, payload: Any, **fields: Any) -> str:
        """Build an envelope for `capability`, publish it to its capability topic and return its message_id once
        the broker acknowledged it; SendRefused / SendUnacknowledged (both SendFailed) otherwise."""
        envelope = self.envelope(capability, payload, **fields)
        self.publish(envelope)
        return envelope.message_id

    def send_many(self, requests: Iterable[Request | tuple[str, Any]], *,
                  timeout: float = SEND_TIMEOUT_S) -> list[Sent]:
        """Build an envelope per request (a Request, or a `(capability, payload)` pair), produce them all, wait
        once for every acknowledgement; one Sent per request, in order. A request that cannot be built (a bad
        name, a payload over the limit) raises before anything is sent; a refused or unacknowledged envelope
        does not raise: its Sent carries the SendFailed, the others are sent all the same."""
        asked = [r if isinstance(r, Request) else Request(r[0], r[1]) for r in requests]
        defaults = {cap: policy_defaults(self.policy(cap)) for cap in {r.capability for r in asked}}  # once each
        envelopes = [self._envelope(r.capability, r.payload, dict(r.fields), defaults[r.capability]) for r in asked]
        return self.publish_many(envelopes, timeout=timeout)

    def publish_many(self, envelopes: Sequence[Envelope], *, topic: str | None = None,
                     timeout: float = SEND_TIMEOUT_S) -> list[Sent]:
        """Publish built envelopes (default: each to its capability topic) with one wait for all acknowledgements;
        one Sent per envelope, in order (see `send_many`)."""
        records = [self.outbound(envelope, topic=topic) for envelope in envelopes]
        outcomes = pipeline.deliver_all(self._producer_(), records, timeout_s=timeout)
        return [Sent(e.message_id, r.topic, None if o is None else send_failure(e.message_id, o))
                for e, r, o in zip(envelopes, records, outcomes, strict=True)]

    def publish(self, envelope: Envelope, *, topic: str | None = None, partition: int | None = None,
                timeout: float = SEND_TIMEOUT_S) -> None:
        """Publish one envelope (default: to its capability topic, created from topics.yaml if missing) and wait
        for the broker's acknowledgement; SendRefused / SendUnacknowledged otherwise."""
        record = self.outbound(envelope, topic=topic, partition=partition)
        [outcome] = pipeline.deliver_all(self._producer_(), [record], timeout_s=timeout)
        if outcome is not None:
            raise send_failure(envelope.message_id, outcome)

    def target(self, envelope: Envelope) -> str:
        """The topic an envelope goes to: its capability topic (an intent: the resolver's intake)."""
        # an intent goes to the resolver in front of the router, never to a capability topic of its own
        return self.names.intents if envelope.capability == RESERVED else self.names.capability(envelope.capability)

    def outbound(self, envelope: Envelope, *, topic: str | None = None,
                 partition: int | None = None) -> pipeline.Outbound:
        """The record that carries `envelope` (its topic ensured): keyed by session_key or message_id, Avro bytes,
        trace headers. Only the `reach-*` headers the product set stay (reach.core.marks)."""
        if envelope.headers:
            marks = kept(envelope.headers, message_id=envelope.message_id, to_agent=envelope.to_agent)
            if marks != envelope.headers:
                envelope = envelope.model_copy(update={"headers": marks})
        target = topic or self.target(envelope)
        self._ensure(target)
        headers: h.Headers = [*tracing.inject(envelope, topic=target), (h.MESSAGE_ID, envelope.message_id.encode())]
        return pipeline.Outbound(target, avrogen.encode(envelope), routing_key(envelope).encode(), headers,
                                 partition)

    def close(self) -> None:
        """Flush what is still queued; stop following the control topic."""
        if self._producer is not None:
            self._producer.flush(10)
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self.contracts is not None:
            self.contracts.close()

    def _control_feed(self) -> ControlSource | None:
        if self._control is not None or not self._follow_control:
            return self._control
        with self._control_lock:
            if self._control is None and time.monotonic() >= self._control_retry_at:
                feed = ControlFeed(names=self.names, kafka=self.kafka)
                try:
                    feed.start(timeout=5.0)
                    self._control = feed
                except Exception as exc:  # noqa: BLE001 - sends go on with the built-in defaults meanwhile
                    self._control_retry_at = time.monotonic() + CONTROL_RETRY_S
                    log.warning("cannot read the control topic %s (%s); sending with the built-in timeouts and "
                                "budget for %.0fs. Run `reach topics apply`.", self.names.control, exc,
                                CONTROL_RETRY_S)
            return self._control

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _producer_(self) -> pipeline.Producing:
        if self._producer is None:
            self._producer = clients.producer(self.kafka, profile="hot")
        return self._producer

    def ensure_topic(self, topic: str) -> None:
        """Create a family topic (e.g. a capability topic) from topics.yaml when it is missing; cached."""
        self._ensure(topic)

    def ensured(self, topic: str) -> bool:
        """Whether `topic` is known to exist (ensured before): publishing to it needs no metadata round trip."""
        return topic in self._topics

    def control_ready(self) -> bool:
        """Whether `policy` answers without reading the control topic first (followed already, not followed, or
        waiting to retry): asyncio callers read it on a thread when not."""
        return self._control is not None or not self._follow_control or time.monotonic() < self._control_retry_at

    def _ensure(self, topic: str) -> None:
        if topic in self._topics:
            return
        if self._admin is None:
            self._admin = clients.admin(self.kafka)
            clients.check_reachable(self._admin)
        meta = self._admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            family = self.names.family_of(topic)
            if family is None:
                raise ReachError(f"Topic {topic} does not exist and is not a family topic; "
                                 "run `reach topics apply`.")
            spec = topics.load(self.settings.topics_file).family(cast(topics.Family, family))
            topics.ensure_topic(self._admin, topic, spec)
        self._topics.add(topic)

    # -- request/response: invoke, invoke_chain (reach.invoke) -----------------------------------------

    def replies(self, client_id: str | None = None) -> ReplyInbox:
        """This client's reply topic `<ns>.replies.<client_id>`, created and opened on first use."""
        inbox: ReplyInbox | None = getattr(self, "_reply_inbox", None)
        if inbox is None:
            inbox = ReplyInbox(self, client_id=client_id)
            self._reply_inbox = inbox
        return inbox

    def invoke(self, capability: str, payload: Any, *, version: str = "*",
               timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> Any:
        """Send a request and return the result of its fallback chain (the agent's, or the fallback's that served
        it); raises InvokeFailed / InvokeRejected / InvokeUnroutable / InvokeTimeout (all InvokeError) for any other
        final ending."""
        return invoke_.invoke(self, self.replies(), capability, payload, version=version,
                              timeout_ms=timeout_ms, **fields)

    def invoke_receipt(self, capability: str, payload: Any, *, version: str = "*",
                       timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> Receipt:
        """Send a request and return the terminal receipt of its fallback chain, whatever its status (the request's
        own when no fallback served it; `invoke_outcome` also gives the request's own ending)."""
        return invoke_.invoke_receipt(self, self.replies(), capability, payload, version=version,
                                      timeout_ms=timeout_ms, **fields)

    def invoke_outcome(self, capability: str, payload: Any, *, version: str = "*",
                       timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> invoke_.Followed:
        """Send a request and return every ending of its fallback chain: `.receipt` the final one, `.first` the
        request's own when a fallback served it (e.g. UNROUTABLE, its child `<id>-fb0` COMPLETED)."""
        return invoke_.invoke_outcome(self, self.replies(), capability, payload, version=version,
                                      timeout_ms=timeout_ms, **fields)

    def stream(self, capability: str, payload: Any, *, version: str = "*",
               timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, poll_s: float = 0.1, status_url: str | None = None,
               **fields: Any) -> Iterator[invoke_.StreamItem]:
        """Send a request and iterate over its progress (StreamProgress) and partial results (StreamChunk) as the
        agent emits them, then one StreamResult; other endings raise as `invoke` does. The partial results are
        read from the stream app's status views (status_url, default REACH_WEB_HOST:REACH_WEB_PORT)."""
        from reach.webclient import auth_headers, views_url

        row_of = invoke_.views_row_of(status_url or views_url(self.settings), auth_headers(self.settings))
        return invoke_.invoke_stream(self, self.replies(), row_of, capability, payload, version=version,
                                     timeout_ms=timeout_ms, poll_s=poll_s, **fields)

    invoke_stream = stream

    def answer(self, message_id: str, answer: Any, *, status_url: str | None = None, redis_url: str | None = None,
               reply_to: str | None = None) -> Answered:
        """Answer the question a waiting message asks (INPUT_REQUIRED; any tenant's: this is the bus-level caller,
        like `reach answer`): checked against the question's schema, its next turn runs on the same agent as the
        message's next generation. Raises reach.core.turns.AnswerRefused saying why not (its `status`: 400 a wrong
        answer, 404 unknown, 409 not waiting or already answered, 410 past its deadline)."""
        import asyncio
        from urllib.parse import quote

        from reach.ops import turns
        from reach.settings import RedisSettings
        from reach.webclient import NotFound, auth_headers, get_json, views_url

        base, auth = status_url or views_url(self.settings), auth_headers(self.settings)

        async def rows(mid: str) -> tuple[int, dict[str, Any]]:
            try:
                return 200, await asyncio.to_thread(get_json, base, f"/messages/{quote(mid, safe='')}", auth=auth)
            except NotFound as exc:
                return 404, {"error": "not_found", "message": str(exc)}

        store = turns.BusTurns(self, kafka=self.kafka, redis_url=redis_url or RedisSettings().url(self.settings.home))
        try:
            return asyncio.run(turns.answer(message_id, answer, tenant=None, rows=rows, store=store, now_ms=now_ms(),
                                            reply_to=reply_to))
        finally:
            store.close()

    def invoke_chain(self, steps: Sequence[invoke_.Step | str], reducer: invoke_.Reducer, *,
                     initial: Any = None, timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS) -> invoke_.ChainResult:
        """Run steps under one trace_id, feeding each step's result and step status to the reducer."""
        return invoke_.invoke_chain(self, self.replies(), steps, reducer, initial=initial, timeout_ms=timeout_ms)
