"""Answer a message waiting for input (INPUT_REQUIRED): the one use case behind `POST /v1/messages/{id}:input`,
`reach answer` and A2A `message/send` with a task id (docs/agents.md#multi-turn-needsinput-ctxturns).

The row must be waiting, of the caller's tenant and within its deadline, the answer must satisfy the question's
schema (reach.core.turns); then one answer per waiting turn is claimed in Redis, an ACCEPTED receipt of the next
generation records the answer on the status row, and the asking turn's envelope, read back from its inbox position,
is published again as that generation with the answer in its conversation (decisions/0036). The receipt goes first,
acknowledged, so the next turn's agent (whose STARTED / COMPLETED follow its envelope) can never be folded before
the answer's ACCEPTED; an envelope that is then not acknowledged is answered by an INPUT_REQUIRED receipt of the
new generation asking the same question again (the row waits, the caller may answer again) and a 503."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from reach import client as sdk
from reach.core.turns import AnswerRefused, checked_answer, next_turn, refusal
from reach.errors import InfraUnavailable
from reach.kafka import clients, codec, topicreader
from reach.kafka import headers as h
from reach.kafka.codec import DecodeError
from reach.names import Names
from reach.records import Envelope, InputRequest, Receipt, Status
from reach.redisclient import sync_client, tag
from reach.settings import KafkaSettings

Rows = Callable[[str], Awaitable[tuple[int, dict[str, Any]]]]
"""The status table's answer for a message id: (HTTP status, the row or an error body)."""
CLAIM_MIN_TTL_MS = 60_000
log = logging.getLogger("reach.turns")


class TurnStore(Protocol):
    """What answering needs besides the row: the asking envelope, the one-answer claim, and the publish."""

    async def envelope_at(self, topic: str, partition: int, offset: int) -> bytes | None:
        """The inbox record at that position; None when it can no longer be read (retention)."""
        ...

    async def claim(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        """True for the first answer to this (message, generation) turn; False when another answer took it."""
        ...

    async def release(self, message_id: str, generation: int) -> None:
        """The publish failed: the turn may be answered again."""
        ...

    async def record(self, receipt: Receipt) -> None:
        """Produce a receipt and wait for the broker's ack (raises when it is not acknowledged)."""
        ...

    async def publish(self, envelope: Envelope) -> None:
        """Produce the next turn's envelope and wait for the broker's ack (raises when it is not acknowledged)."""
        ...


@dataclass(frozen=True, slots=True)
class Answered:
    """The answer was taken: the message runs again as `generation`, its `turn`-th question answered."""

    message_id: str
    generation: int
    turn: int


async def answer(message_id: str, value: Any, *, tenant: str | None, rows: Rows, store: TurnStore, now_ms: int,
                 reply_to: str | None = None,
                 authorize: Callable[[str], Awaitable[None]] | None = None) -> Answered:
    """Continue `message_id` with the caller's answer, or raise AnswerRefused saying why not (its `status` is the
    HTTP status: 400/413 a bad answer, 404 unknown or another tenant's, 409 not waiting or already answered, 410
    past its deadline or its envelope gone, 503 the status table or the bus not answering). `authorize`, given the
    message's capability, raises when the answering caller may not run it (an interface's permission, spend limit
    and quota: an answer starts a turn like a send does)."""
    code, row = await rows(message_id)
    if code == 404:
        raise AnswerRefused(404, "not_found", f"no message {message_id!r} in the status table",
                            "check the id the send returned")
    if code != 200:
        raise AnswerRefused(503 if code >= 500 else code, str(row.get("error", "unavailable")),
                            str(row.get("message", "the status table did not answer")), "try again")
    refused = refusal(row, tenant=tenant, now_ms=now_ms)
    if refused is not None:
        raise refused
    if authorize is not None:  # the caller's own rights on the capability the next turn runs (may raise)
        await authorize(str(row.get("capability", "")))
    answered = checked_answer(row, value)
    if answered.origin_topic is None or answered.origin_partition is None or answered.origin_offset is None:
        raise AnswerRefused(409, "no_origin", f"{message_id}'s question does not say where its envelope is",
                            "send the request again")
    raw = await store.envelope_at(answered.origin_topic, answered.origin_partition, answered.origin_offset)
    asking = _decoded(raw)
    if asking is None or asking.message_id != message_id:
        raise AnswerRefused(410, "gone", f"{message_id}'s envelope is no longer in its inbox "
                            f"({answered.origin_topic}[{answered.origin_partition}]@{answered.origin_offset})",
                            "send the request again")
    generation = int(row["generation"])
    deadline = int(row.get("deadline") or now_ms)
    if not await store.claim(message_id, generation, ttl_ms=max(CLAIM_MIN_TTL_MS, deadline - now_ms)):
        raise AnswerRefused(409, "already_answered", f"{message_id}'s question (turn {answered.turn}) was already "
                            "answered", "read the message's status")
    envelope, receipt = next_turn(asking.model_copy(update={"generation": generation}), answered,
                                  agent_id=row.get("agent_id"), instance_id=row.get("instance_id"), now_ms=now_ms,
                                  reply_to=reply_to)
    try:  # the answer's ACCEPTED first: nothing of the next turn can be folded before it
        await store.record(receipt)
    except BaseException:
        await store.release(message_id, generation)
        raise
    try:
        await store.publish(envelope)
    except BaseException:
        await _ask_again(store, receipt, row, now_ms)
        await store.release(message_id, generation)
        raise
    return Answered(message_id=message_id, generation=envelope.generation, turn=answered.turn)


async def _ask_again(store: TurnStore, accepted: Receipt, row: dict[str, Any], now_ms: int) -> None:
    """The next turn's envelope was not acknowledged after its ACCEPTED was: the row waits again for an answer (an
    INPUT_REQUIRED of the new generation with the same question and asking envelope), so the caller's retry is taken
    instead of a turn that never runs until its deadline. If this receipt fails too, the deadline ends the message."""
    asked = InputRequest.model_validate(row["input"])
    again = accepted.model_copy(update={"status": Status.INPUT_REQUIRED, "at": now_ms, "input": asked})
    try:
        await store.record(again)
    except Exception:  # noqa: BLE001 - the envelope's failure is what the caller is told
        log.warning("answer to %s: the next turn was not published and the question could not be asked again; "
                    "the message ends at its deadline", accepted.message_id)


def _decoded(raw: bytes | None) -> Envelope | None:
    if raw is None:
        return None
    try:
        return codec.decode(raw, Envelope)
    except DecodeError:
        return None


def claim_key(namespace: str, message_id: str, generation: int) -> str:
    """The claim of one question's answer: hash-tagged by message id, on the slot of the message's other keys."""
    return f"{namespace}:answer:{tag(message_id)}:{generation}"


class BusTurns:
    """TurnStore over the broker and Redis; blocking calls run in a worker thread."""

    def __init__(self, client: sdk.Client, *, kafka: KafkaSettings, redis_url: str) -> None:
        self._client = client
        self._kafka = kafka
        self._names: Names = client.names
        self._redis = sync_client(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._producer = clients.producer(kafka, profile="hot")

    async def envelope_at(self, topic: str, partition: int, offset: int) -> bytes | None:
        found = await asyncio.to_thread(topicreader.read_one, "answer", self._kafka, (topic, partition, offset))
        if found is topicreader.Missing.PENDING:  # not read in time (a leader move): the caller may try again
            raise InfraUnavailable(f"the asking envelope at {topic}[{partition}]@{offset} could not be read in time")
        return found if isinstance(found, bytes) else None  # GONE (retention) or a tombstone: 410

    async def claim(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        key = claim_key(self._names.namespace, message_id, generation)
        try:
            return bool(await asyncio.to_thread(self._redis.set, key, b"1", nx=True, px=ttl_ms))
        except redis.RedisError as exc:  # no claim, no answer: two answers must never both run
            raise InfraUnavailable(f"Redis did not answer the claim of {message_id}'s answer: {exc}") from None

    async def release(self, message_id: str, generation: int) -> None:
        try:
            await asyncio.to_thread(self._redis.delete, claim_key(self._names.namespace, message_id, generation))
        except redis.RedisError:  # the claim then lapses at the message's deadline
            pass

    async def record(self, receipt: Receipt) -> None:
        await asyncio.to_thread(self._record, receipt)

    def _record(self, receipt: Receipt) -> None:
        failed: list[object] = []
        self._producer.produce(self._names.receipts, codec.encode(receipt), key=receipt.message_id.encode(),
                               headers=[(h.MESSAGE_ID, receipt.message_id.encode())],
                               on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
        if self._producer.flush(10) or failed:
            raise InfraUnavailable(f"the {receipt.status.value} receipt of {receipt.message_id} was not acknowledged: "
                                   f"{failed[0] if failed else 'no answer from the broker in 10 s'}")

    async def publish(self, envelope: Envelope) -> None:
        await asyncio.to_thread(self._client.publish, envelope)  # acknowledged, or raises

    def close(self) -> None:
        self._producer.flush(10)
        self._redis.close()
