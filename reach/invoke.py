"""Request/response over Kafka: wait for a message's terminal receipt on a per-client reply topic.

The status fold sends each (message, generation)'s first terminal receipt to the envelope's
reply_to; a ReplyInbox owns one reply topic (`<ns>.replies.<client_id>`, created from the
`replies` family), reads it from where it stood when opened, and hands each receipt to whoever
waits for that message_id (reach.replypump.ReplyPump, shared with the gateway's ReplyHub).
A waiting caller follows its request's fallback chain (docs/decisions/0034): when the reply says the ending went
on to the capability's fallback, the wait goes on for the child (same reply topic) and returns the chain's final
ending, with the request's own ending kept (`Followed.first`). The row's first-terminal rule is unchanged.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from reach import lineage
from reach.core.progress import Chunks, Cursor, news
from reach.errors import InfraUnavailable, ReachError
from reach.kafka import clients, topicreader, topics
from reach.records import Receipt, Status, StepStatus
from reach.replypump import ReplyPump

if TYPE_CHECKING:
    from reach import client as sdk

DEFAULT_TIMEOUT_MS = 30_000
MAX_CHAIN = 3  # reach.core.fallback.MAX_DEPTH: a chain has at most this many children


class InvokeError(ReachError):
    """The request did not complete; `.receipt` is its terminal receipt (None on a timeout)."""

    exit_code = 1

    def __init__(self, message: str, *, message_id: str, receipt: Receipt | None = None) -> None:
        super().__init__(message)
        self.message_id = message_id
        self.receipt = receipt


class InvokeFailed(InvokeError):
    """The agent failed it (business error, retries exhausted) or the router shed it (kind OVERLOAD)."""


class InvokeRejected(InvokeError):
    """The envelope itself was faulty (REJECTED): fix the request, do not retry it as is."""


class InvokeUnroutable(InvokeError):
    """No instance serves the capability (UNROUTABLE, or DEAD_LETTERED with reason NO_ROUTE)."""


class InvokeTimeout(InvokeError):
    """No terminal receipt within the timeout, or the budget ran out (EXPIRED)."""

    exit_code = 3


class InputRequired(InvokeError):
    """The agent asks a question before it can finish (INPUT_REQUIRED): `.receipt.input` holds the question and its
    answer's schema; `Client.answer` continues the message."""


def _describe(receipt: Receipt) -> str:
    who = f" by {receipt.agent_id} ({receipt.instance_id})" if receipt.instance_id else ""
    error = f": {receipt.error.kind}/{receipt.error.code}: {receipt.error.message}" if receipt.error else ""
    retry = f"; retry after {receipt.retry_after_ms} ms" if receipt.retry_after_ms else ""
    return f"{receipt.capability} request {receipt.message_id} ended {receipt.status}{who}{error}{retry}"


def raise_for(receipt: Receipt) -> None:
    """Raise the typed error a terminal receipt other than COMPLETED stands for (InputRequired for a question)."""
    status, text, mid = receipt.status, _describe(receipt), receipt.message_id
    if status is Status.COMPLETED:
        return
    if status is Status.INPUT_REQUIRED:
        question = receipt.input.question if receipt.input else ""
        raise InputRequired(f"{receipt.capability} request {mid} asks: {question} (answer it with "
                            f"Client.answer({mid!r}, ...) or `reach answer {mid} --payload JSON`)",
                            message_id=mid, receipt=receipt)
    if status is Status.REJECTED:
        raise InvokeRejected(text, message_id=mid, receipt=receipt)
    if status is Status.UNROUTABLE or (status is Status.DEAD_LETTERED and receipt.error
                                       and receipt.error.kind == "NO_ROUTE"):
        raise InvokeUnroutable(text, message_id=mid, receipt=receipt)
    if status is Status.EXPIRED:
        raise InvokeTimeout(text, message_id=mid, receipt=receipt)
    raise InvokeFailed(text, message_id=mid, receipt=receipt)


def raise_for_chain(followed: Followed) -> None:
    """`raise_for` of a chain's final ending; the error says how the chain went (the request's own ending first)."""
    try:
        raise_for(followed.receipt)
    except InvokeError as exc:
        note = followed.note()
        if note is None:
            raise
        raise type(exc)(f"{exc} ({note})", message_id=exc.message_id, receipt=exc.receipt) from None


def no_reply(message_id: str, timeout_ms: int) -> InvokeTimeout:
    """The error of a wait that saw no terminal receipt within timeout_ms."""
    return InvokeTimeout(f"no terminal receipt for {message_id} within {timeout_ms} ms; it may still finish: "
                         f"`reach status {message_id}` shows where it is.", message_id=message_id)


def result_value(receipt: Receipt) -> Any:
    """A receipt's result: the JSON value when it parses, else the raw bytes; None without a result."""
    if receipt.result is None:
        return None
    try:
        return json.loads(receipt.result)
    except ValueError:
        return receipt.result


@dataclass(frozen=True)
class Followed:
    """What a waiting caller gets: the endings of its request's fallback chain, in order (one when no fallback
    served it). `receipt` is the chain's final ending (a child's, whose message_id is `<id>-fb<generation>`)."""

    endings: tuple[Receipt, ...]

    @property
    def receipt(self) -> Receipt:
        return self.endings[-1]

    @property
    def first(self) -> Receipt | None:
        """The request's own ending when a fallback served it (e.g. UNROUTABLE), else None."""
        return self.endings[0] if len(self.endings) > 1 else None

    def note(self) -> str | None:
        """One line saying how the chain went, for a caller to show; None without a fallback."""
        if self.first is None:
            return None
        steps = " -> ".join(f"{r.capability} {r.message_id} {r.status}" for r in self.endings)
        return f"served by a fallback: {steps}"


def chain_timeout(endings: Sequence[Receipt], waiting_for: str, timeout_ms: int) -> InvokeTimeout:
    """The error of a wait whose request ended and went on to a fallback child that did not end in time."""
    first = endings[0]
    return InvokeTimeout(f"{first.capability} request {first.message_id} ended {first.status} and went on to its "
                         f"fallback {waiting_for}, which did not end within {timeout_ms} ms; "
                         f"`reach status {first.message_id}` shows where it is.", message_id=first.message_id,
                         receipt=first)


def default_client_id() -> str:
    """A reply-topic id unique to this process."""
    return f"c{uuid.uuid4().hex[:12]}"


def host_client_id(prefix: str = "cli") -> str:
    """A stable reply-topic id for command-line use on this host (one topic, not one per run)."""
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-") or "host"
    return f"{prefix}-{host}"


class ReplyInbox:
    """One client's reply topic; thread-safe `wait(message_id)`."""

    def __init__(self, client: sdk.Client, *, client_id: str | None = None) -> None:
        self.client_id = client_id or default_client_id()
        self.topic = client.names.replies(self.client_id)
        admin = clients.admin(client.kafka)
        clients.check_reachable(admin)
        spec = topics.load(client.settings.topics_file).family("replies")
        topics.ensure_topic(admin, self.topic, spec)
        self._consumer = clients.consumer(f"{self.topic}.reader.{uuid.uuid4().hex[:6]}", client.kafka)
        # a reply topic created just now may have no leader yet: topicreader retries NOT_LEADER
        clients.assign(self._consumer, self.topic, {p: topicreader.watermarks(self._consumer, self.topic, p)[1]
                                                    for p in topicreader.partitions(self._consumer, self.topic)})
        self._pump = ReplyPump(partial(clients.take, self._consumer))

    def wait(self, message_id: str, *, generation: int = 0, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Receipt:
        """The first terminal receipt of (message_id, generation); InvokeTimeout when none comes in time."""
        found = self._pump.wait((message_id, generation), timeout_ms / 1000)
        if found is None:
            raise no_reply(message_id, timeout_ms)
        return found

    def follow(self, message_id: str, *, generation: int = 0, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Followed:
        """The endings of (message_id, generation)'s fallback chain, waiting for each child in turn within one
        timeout_ms overall; InvokeTimeout when the request's or a child's ending does not come in time."""
        deadline = time.monotonic() + timeout_ms / 1000
        key, endings = (message_id, generation), list[Receipt]()
        while True:
            found = self._pump.wait(key, max(deadline - time.monotonic(), 0.0))
            if found is None:
                raise chain_timeout(endings, key[0], timeout_ms) if endings else no_reply(message_id, timeout_ms)
            endings.append(found)
            child = self._pump.child_of(key)
            if child is None or len(endings) > MAX_CHAIN:
                return Followed(tuple(endings))
            key = child

    def child_of(self, message_id: str, generation: int = 0) -> tuple[str, int] | None:
        """The fallback child the ending of (message_id, generation) went on to, as its reply named it; None when it
        named none (known once that ending was handed out)."""
        return self._pump.child_of((message_id, generation))

    def poll(self, message_id: str, *, generation: int = 0, timeout_s: float = 0.1) -> Receipt | None:
        """The first terminal receipt of (message_id, generation) if it arrives within timeout_s, else None."""
        return self._pump.wait((message_id, generation), timeout_s)

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True)
class Step:
    """One step of a chain: a capability and its payload (a value, or built from the previous step)."""

    capability: str
    payload: Any = None
    version: str = "*"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """What one step of a chain produced."""

    capability: str
    message_id: str
    status: StepStatus
    result: Any
    receipt: Receipt | None
    error: InvokeError | None = None
    first: Receipt | None = None  # the step's own ending when its capability's fallback served it


@dataclass(frozen=True)
class ChainResult:
    """The reduced value of a chain, every step's outcome, and the trace they share."""

    value: Any
    steps: list[StepResult]
    trace_id: str


def invoke_outcome(
    client: sdk.Client,
    inbox: ReplyInbox,
    capability: str,
    payload: Any,
    *,
    version: str = "*",
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    **fields: Any,
) -> Followed:
    """Send a request with reply_to = the inbox's topic and return the endings of its fallback chain (any status)."""
    fields.setdefault("budget_ms", max(timeout_ms, 1))
    envelope = client.envelope(capability, payload, version=version, reply_to=inbox.topic, **fields)
    client.publish(envelope)
    followed = inbox.follow(envelope.message_id, generation=envelope.generation, timeout_ms=timeout_ms)
    for receipt in followed.endings:  # from a handler: what each run spent counts towards its parent's budget
        lineage.child_ended(receipt)
    return followed


def invoke_receipt(client: sdk.Client, inbox: ReplyInbox, capability: str, payload: Any, *, version: str = "*",
                   timeout_ms: int = DEFAULT_TIMEOUT_MS, **fields: Any) -> Receipt:
    """Send a request and return the terminal receipt of its fallback chain (any status; its own when no fallback
    served it)."""
    return invoke_outcome(client, inbox, capability, payload, version=version, timeout_ms=timeout_ms,
                          **fields).receipt


def invoke(
    client: sdk.Client,
    inbox: ReplyInbox,
    capability: str,
    payload: Any,
    *,
    version: str = "*",
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    **fields: Any,
) -> Any:
    """The result of one request's fallback chain (its own agent's, or the fallback's that served it), or a typed
    InvokeError for the chain's final ending."""
    followed = invoke_outcome(client, inbox, capability, payload, version=version, timeout_ms=timeout_ms, **fields)
    raise_for_chain(followed)
    return result_value(followed.receipt)


Reducer = Callable[[Any, StepResult], Any]


def invoke_chain(
    client: sdk.Client,
    inbox: ReplyInbox,
    steps: Sequence[Step | str],
    reducer: Reducer,
    *,
    initial: Any = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> ChainResult:
    """Run steps in order under one trace_id; `reducer(value, step_result)` gives the next step's payload.

    A step whose Step.payload is None receives the reduced value so far; a failing step does not
    raise: its StepResult has status `error` and the reducer decides (it may raise to stop).
    """
    from reach.envelopes import new_id

    trace_id = fields_trace = new_id()
    value, parent, results = initial, None, []
    for raw_step in steps:
        step = Step(raw_step) if isinstance(raw_step, str) else raw_step
        payload = value if step.payload is None else step.payload
        options = {"trace_id": fields_trace, "parent_id": parent, **step.options}
        followed: Followed | None = None
        try:
            followed = invoke_outcome(client, inbox, step.capability, payload, version=step.version,
                                      timeout_ms=timeout_ms, **options)
            receipt = followed.receipt
            raise_for(receipt)
            status = receipt.step_status or StepStatus.OK
            outcome = StepResult(step.capability, followed.endings[0].message_id, status, result_value(receipt),
                                 receipt, first=followed.first)
        except InvokeError as exc:
            mid, first = (followed.endings[0].message_id, followed.first) if followed else (exc.message_id, None)
            outcome = StepResult(step.capability, mid, StepStatus.ERROR, None, exc.receipt, exc, first=first)
        results.append(outcome)
        parent = outcome.message_id
        value = reducer(value, outcome)
    return ChainResult(value, results, trace_id)


# -- streaming: partial results while the request runs (docs/agents.md#progress-and-partial-results) ----------

RowOf = Callable[[str], "dict[str, Any] | None"]
"""The status row of a message_id as the stream app's views answer it (None: not folded yet, or unreachable)."""
SETTLE_S = 2.0  # after the reply: how long to wait for the row to show the ending (and so every chunk before it)


@dataclass(frozen=True)
class StreamChunk:
    """One partial result: `data` is the text (kind text) or the JSON value (kind json); append=False replaces
    the chunks before it. `seq` counts within the `attempt` (a retried attempt starts over, replacing)."""

    seq: int
    kind: str
    data: Any
    append: bool
    attempt: int


@dataclass(frozen=True)
class StreamProgress:
    """The handler's last progress: fraction in [0, 1] (or None) and a note."""

    fraction: float | None
    note: str | None


@dataclass(frozen=True)
class StreamResult:
    """The last item of a stream: the result (as `invoke` returns it) and the terminal receipt."""

    value: Any
    receipt: Receipt
    first: Receipt | None = None  # the request's own ending when its capability's fallback served it


@dataclass(frozen=True)
class StreamFallback:
    """A stream's request (or a child) ended and went on to its capability's fallback: the child streams next."""

    first: Receipt  # the ending that went on (e.g. UNROUTABLE)
    child: str  # the child's message id, `<id>-fb<generation>`


StreamItem = StreamChunk | StreamProgress | StreamFallback | StreamResult


def _row_updates(row: dict[str, Any] | None, cursor: Cursor) -> tuple[list[StreamProgress | StreamChunk], Cursor]:
    raw = (row or {}).get("progress")
    if raw is None:
        return [], cursor
    chunks, moved, cursor = news(Chunks.model_validate(raw), cursor)
    items: list[StreamProgress | StreamChunk] = [StreamProgress(cursor.fraction, cursor.note)] if moved else []
    for chunk in chunks:
        data: Any = json.loads(chunk.data) if chunk.kind == "json" else chunk.data
        items.append(StreamChunk(chunk.seq, chunk.kind, data, chunk.append, cursor.attempt))
    return items, cursor


def stream_receipt(inbox: ReplyInbox, row_of: RowOf, message_id: str, *, generation: int = 0,
                   timeout_ms: int = DEFAULT_TIMEOUT_MS, poll_s: float = 0.1,
                   clock: Callable[[], float] = time.monotonic) -> Iterator[StreamProgress | StreamChunk |
                                                                           StreamFallback | Receipt]:
    """Progress and chunks of a sent request as the status table shows them, then its first terminal receipt; when
    that ending went on to the capability's fallback (the reply names the child), a StreamFallback, then the child's
    progress and chunks and so on along the chain (at most MAX_CHAIN hops): the receipt yielded last is the chain's.

    The reply topic carries each ending; the row (re-read every poll_s) carries what came before it, and once
    the reply is in, the row is read until it shows the ending too (at most SETTLE_S), so no chunk folded
    before the ending is missed. InvokeTimeout when the chain does not end within timeout_ms (one wait overall)."""
    deadline = clock() + timeout_ms / 1000
    key, endings = (message_id, generation), list[Receipt]()
    while True:
        receipt = yield from _stream_one(inbox, row_of, key, deadline=deadline, poll_s=poll_s, clock=clock,
                                         timeout=lambda k: chain_timeout(endings, k, timeout_ms) if endings
                                         else no_reply(message_id, timeout_ms))
        endings.append(receipt)
        child = inbox.child_of(*key) if len(endings) <= MAX_CHAIN else None
        if child is None:
            yield receipt
            return
        yield StreamFallback(first=receipt, child=child[0])
        key = child


def _stream_one(inbox: ReplyInbox, row_of: RowOf, key: tuple[str, int], *, deadline: float, poll_s: float,
                clock: Callable[[], float], timeout: Callable[[str], InvokeError]
                ) -> Generator[StreamProgress | StreamChunk, None, Receipt]:
    """One message of the chain: its progress and chunks, then (returned) its ending."""
    message_id, generation = key
    cursor = Cursor()
    while True:
        receipt = inbox.poll(message_id, generation=generation, timeout_s=poll_s)
        items, cursor = _row_updates(row_of(message_id), cursor)
        yield from items
        if receipt is not None:
            break
        if clock() >= deadline:
            raise timeout(message_id)
    settle = clock() + SETTLE_S
    while True:
        row = row_of(message_id)
        if row is not None and row.get("generation") == generation and row.get("status") == str(receipt.status):
            items, cursor = _row_updates(row, cursor)
            yield from items
            break
        if clock() >= settle:
            break
        time.sleep(poll_s)
    return receipt


def stream_request(client: sdk.Client, inbox: ReplyInbox, row_of: RowOf, capability: str, payload: Any, *,
                   version: str = "*", timeout_ms: int = DEFAULT_TIMEOUT_MS, poll_s: float = 0.1,
                   **fields: Any) -> Iterator[StreamProgress | StreamChunk | StreamFallback | Receipt]:
    """Send a request with reply_to = the inbox's topic; yield what stream_receipt yields (the receipt last)."""
    fields.setdefault("budget_ms", max(timeout_ms, 1))
    envelope = client.envelope(capability, payload, version=version, reply_to=inbox.topic, **fields)
    client.publish(envelope)
    for item in stream_receipt(inbox, row_of, envelope.message_id, generation=envelope.generation,
                               timeout_ms=timeout_ms, poll_s=poll_s):
        if isinstance(item, Receipt):
            lineage.child_ended(item)
        yield item


def invoke_stream(client: sdk.Client, inbox: ReplyInbox, row_of: RowOf, capability: str, payload: Any, *,
                  version: str = "*", timeout_ms: int = DEFAULT_TIMEOUT_MS, poll_s: float = 0.1,
                  **fields: Any) -> Iterator[StreamItem]:
    """Send a request and yield its progress and partial results as they come, then one StreamResult; any ending
    but COMPLETED raises the InvokeError `invoke` raises (after the chunks that came before it). A request whose
    capability's fallback served it streams on through the chain: a StreamFallback says so, the child's progress and
    chunks follow, and the StreamResult is the chain's (`first`: the request's own ending), as `invoke` follows it."""
    firsts: list[Receipt] = []
    for item in stream_request(client, inbox, row_of, capability, payload, version=version, timeout_ms=timeout_ms,
                               poll_s=poll_s, **fields):
        if isinstance(item, Receipt):
            raise_for_chain(Followed((*firsts, item)))
            yield StreamResult(result_value(item), item, first=firsts[0] if firsts else None)
            return
        if isinstance(item, StreamFallback):
            firsts.append(item.first)
        yield item


def views_row_of(base_url: str, auth: Mapping[str, str]) -> RowOf:
    """A RowOf reading the stream app's views at base_url; a message not folded yet, or a view that cannot
    answer right now (a partition moving, the app restarting), reads as None: the stream tries again."""
    from urllib.parse import quote

    from reach.webclient import NotFound, get_json

    def row_of(message_id: str) -> dict[str, Any] | None:
        try:
            return get_json(base_url, f"/messages/{quote(message_id, safe='')}", timeout=5.0, auth=auth)
        except (NotFound, InfraUnavailable):
            return None

    return row_of
