"""The operator's side of handoffs: read the queue, take one, answer it or re-route it (Kafka I/O).

An answer completes the original message with a COMPLETED receipt whose resolution is stage `human`;
a re-route sends the original envelope on to the capability the operator names and maps the intent to it
on the control topic (the exact map learns it; a router handoff of a request that named no intent teaches
nothing). Every move is first claimed from the version it read (reach.intent.claims): of two operators
moving the same handoff at once, one writes and the other gets HandoffConflict. The handoff record's new
state is written last, so a failed step leaves the handoff where it was and the command can be run again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from reach import control
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.intent import dispatch, mappings
from reach.intent.claims import CLAIM_TTL_S, Claims, RedisClaims, claim_key
from reach.intent.errors import HandoffConflict, IntentError
from reach.intent.handoff import Handoff, decode, encode
from reach.kafka import codec, topicreader
from reach.kafka import headers as H
from reach.kafka.acked import send_acked
from reach.kafka.worker import Output
from reach.names import Names, check_capability
from reach.records import IntentResolution, Receipt, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings, RedisSettings
from reach.terminals import Fence, Terminal, fence_from_settings


def _still_open(envelope: dict[str, Any]) -> None:
    """A message past its deadline has ended EXPIRED (the timekeeper's): an answer now would be a second,
    different terminal outcome, and a re-route would run work nobody waits for."""
    deadline = envelope.get("deadline")
    if deadline is not None and now_ms() >= deadline:
        raise IntentError(f"Message {envelope.get('message_id')} passed its deadline and ended EXPIRED; its caller "
                          "has that answer. Send a new request (with a budget that covers a human's time) instead.")


class HandoffDesk:
    """Reads and moves handoffs of one namespace."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, redis: RedisSettings,
                 claims: Callable[[], Claims] | None = None, fence: Fence | None = None) -> None:
        self.names = names
        self.kafka = kafka
        self._redis = redis
        self._claims_factory = claims or (lambda: RedisClaims(redis.url()))
        self._claims: Claims | None = None
        self._fence = fence

    @contextmanager
    def _claimed(self, current: Handoff, by: str) -> Iterator[None]:
        """Hold the right to write the version after `current`'s; released again if the move fails."""
        if self._claims is None:
            self._claims = self._claims_factory()
        key = claim_key(self.names.namespace, current.message_id, current.at, current.version)
        owner = f"{by}:{uuid.uuid4().hex}"
        if not self._claims.claim(key, owner, CLAIM_TTL_S):
            raise HandoffConflict(
                f"Handoff {current.message_id} is being moved by another operator (it was {current.state} at "
                f"version {current.version} when you read it); nothing was written. Run `reach handoff show "
                f"{current.message_id}` to see where it stands.")
        try:
            yield
        except BaseException:
            self._claims.release(key, owner)
            raise

    def all(self) -> dict[str, Handoff]:
        """The latest record per message_id (the compacted topic read to its end)."""
        # a record that is not a handoff is passed over: never fatal for the queue
        return topicreader.latest_records("handoff", self.names.handoff, decode, self.kafka)

    def get(self, message_id: str) -> Handoff:
        found = self.all().get(message_id)
        if found is None:
            raise IntentError(f"No handoff for message {message_id}; `reach handoff ls` lists them.")
        return found

    def take(self, message_id: str, *, by: str) -> Handoff:
        current = self.get(message_id)
        moved = current.moved("TAKEN", by=by, at=now_ms())
        with self._claimed(current, by):
            self._send([(self.names.handoff, moved.message_id, encode(moved), [])])
        return moved

    def answer(self, message_id: str, answer: str, *, by: str) -> Handoff:
        """Complete the original message with the operator's answer."""
        current = self.get(message_id)
        moved = current.moved("ANSWERED", by=by, at=now_ms(), resolution=answer)
        envelope = codec.decode_dict("Envelope", current.envelope_bytes())
        _still_open(envelope)
        receipt = dispatch.receipt(envelope, Status.COMPLETED, now_ms(), result=dispatch.answer_result(answer),
                                   resolution=IntentResolution(stage="human", intent=current.intent, by=by))
        with self._claimed(current, by):
            value = self._first_terminal(codec.encode(receipt), receipt.message_id, receipt.generation)
            self._send([(self.names.receipts, message_id, value, _reply(envelope))])
            self._send([(self.names.handoff, message_id, encode(moved), [])])
        return moved

    def _first_terminal(self, value: bytes, message_id: str, generation: int) -> bytes:
        """First terminal wins (reach.terminals): a message that ended meanwhile (its budget, a late branch) keeps
        that ending, and the answer is refused before anything is written. A human answer that won before (a run of
        this command whose publish failed) is published again, not refused."""
        if self._fence is None:
            self._fence = fence_from_settings("handoff desk", namespace=self.names.namespace,
                                              redis_settings=self._redis)
        [claimed] = self._fence.claim([Terminal(message_id, generation, value)])
        if not claimed.won:
            ended = codec.decode(claimed.receipt, Receipt)
            if ended.status is Status.COMPLETED and ended.resolution is not None and ended.resolution.stage == "human":
                return claimed.receipt
            raise IntentError(f"Message {message_id} already ended {ended.status.value}; its caller has that answer, "
                              "so this one was not sent. Send a new request instead.")
        return claimed.receipt

    def reroute(self, message_id: str, capability: str, *, by: str) -> Handoff:
        """Send the original envelope on to `capability` and map its intent there."""
        check_capability(capability)
        current = self.get(message_id)
        moved = current.moved("REROUTED", by=by, at=now_ms(), resolution=capability)
        # checked before any write; a router handoff of a request that named a capability has no words to map
        mapping = mappings.record(current.intent, capability, source="handoff", by=by) if current.intent else None
        envelope = codec.decode_dict("Envelope", current.envelope_bytes())
        _still_open(envelope)
        tenant = envelope.get("tenant")
        served = {c.name for reg in read_registry(self.kafka, self.names).live(now_ms())
                  if not reg.tenants or tenant in reg.tenants for c in reg.capabilities}
        if capability not in served:  # a typo would end the message UNROUTABLE and teach the map a dead name
            raise IntentError(f"No live instance serves {capability} for tenant {tenant!r}; "
                              "`reach agents` lists what runs. The handoff stays where it is.")
        forward: dict[str, Any] = {**envelope, "capability": capability}
        with self._claimed(current, by):
            self._send([(self.names.capability(capability), message_id, codec.encode_dict("Envelope", forward),
                         [(H.MESSAGE_ID, message_id.encode())])])
            if mapping is not None:
                control.publish(mapping, names=self.names, kafka=self.kafka)
            self._send([(self.names.handoff, message_id, encode(moved), [])])
        return moved

    def _send(self, records: list[tuple[str, str, bytes, H.Headers]]) -> None:
        errors = send_acked(self.kafka, [Output(topic, value, key=key.encode(), headers=headers)
                                         for topic, key, value, headers in records], timeout=15)
        if errors:
            why = ", ".join(errors)
            raise InfraUnavailable(f"The broker did not acknowledge the handoff step ({why}); nothing further was "
                                   "written, run the command again.")


def _reply(envelope: dict[str, Any]) -> H.Headers:
    reply = envelope.get("reply_to")
    return [(H.REPLY_TO, reply.encode())] if reply else []
