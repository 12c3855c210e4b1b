"""The router's fan-out (docs/decisions/0040): an event on a capability served in `subscribe` mode becomes one
delivery per subscribing agent, each a child envelope on the capability's topic routed as an ordinary request of that
one agent; the parent gets a FANNED_OUT receipt naming them. On a capability some agent handles, the subscribers
beside the handlers are notified instead (docs/decisions/0076): a request forwarded to a handler also sends one
notification per subscriber whose filter it passes. The rules are reach.core.fanout; this module holds the per-batch
cache of who serves a capability in which mode, and the records the hot path produces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reach.core import fanout
from reach.core.candidates import RouteRequest
from reach.kafka import headers as H
from reach.kafka.acks import Position
from reach.kafka.codec import encode_dict
from reach.kafka.worker import Output
from reach.records import AgentRegistration, Status


@dataclass(frozen=True, slots=True)
class Plan:
    """What the hot path does with one envelope: fan it out to `agents`, or route it among `candidates`
    (`delivery`: it is one delivery of a fan-out, queued by its subscriber rather than shed)."""

    candidates: Sequence[AgentRegistration]
    agents: tuple[str, ...] = ()
    delivery: bool = False
    observers: tuple[str, ...] = ()  # subscribers notified once a handler gets the request


class FanOutStep:
    """The hot path's fan-out: which capabilities fan out (per batch, from the live registrations), the child
    envelopes and the parent's FANNED_OUT receipt. One per router; `refused` remembers the instances it logged."""

    def __init__(self, receipts_topic: str) -> None:
        self._receipts = receipts_topic

    def plan(self, envelope: Mapping[str, Any], registrations: Sequence[AgentRegistration],
             splits: dict[str, fanout.Split]) -> Plan:
        capability = envelope["capability"]
        parts = splits.get(capability)
        if parts is None:
            parts = splits[capability] = fanout.split(capability, registrations)
        if fanout.is_delivery(envelope) or fanout.is_notification(envelope):  # to its one agent (to_agent), once
            return Plan(candidates=registrations, delivery=True)
        if not parts.fans_out:
            return Plan(candidates=parts.handlers, observers=self._observers(envelope, parts))
        agents = fanout.subscribers(envelope, parts)
        return Plan(candidates=(), agents=tuple(agents))  # none READY: routed among none, NoRoute says so

    def send(self, position: Position, *, topic: str, envelope: dict[str, Any], request: RouteRequest,
             agents: Sequence[str], reply: H.Headers, now: int) -> list[Output]:
        """The deliveries to the capability's topic, then the parent's FANNED_OUT receipt (no delivery clock: the
        parent is never rerouted; its deadline still expires it), all acknowledged before the record commits."""
        outputs = []
        for agent in agents:
            child = fanout.delivery(envelope, agent, share=len(agents))  # the event's budget split among them
            outputs.append(_child(topic, child, position))
        book = fanout.announced(agents, request.message_id, request.generation)
        receipt = {
            "message_id": request.message_id, "generation": request.generation, "trace_id": request.trace_id,
            "tenant": request.tenant, "capability": request.capability, "status": Status.FANNED_OUT.value,
            "attempt": request.attempt, "at": now, "deadline": request.deadline, "delivery_timeout_ms": 0,
            "reroutes": request.reroutes, "callback": request.callback, "fanout": book.model_dump(),
        }
        key = request.message_id.encode()
        outputs.append(Output(self._receipts, encode_dict("Receipt", receipt), key=key,
                              headers=[(H.MESSAGE_ID, key), *reply], cause=position))
        return outputs

    @staticmethod
    def _observers(envelope: Mapping[str, Any], parts: fanout.Split) -> tuple[str, ...]:
        """The subscribers beside the handlers this request notifies: on its first routing only (a retry or a
        reroute of the request notifies nobody again)."""
        if not parts.observed or (envelope.get("attempt") or 1) > 1 or (envelope.get("reroutes") or 0) > 0:
            return ()
        return tuple(fanout.subscribers(envelope, parts, observing=True))

    @staticmethod
    def notify(position: Position, *, topic: str, envelope: Mapping[str, Any], agents: Sequence[str]) -> list[Output]:
        """The notifications of a request a handler got, to the capability's topic (acknowledged before the record
        commits; a batch read again makes the same ids, which each subscriber runs once)."""
        return [_child(topic, fanout.notification(envelope, agent, share=len(agents)), position) for agent in agents]


def receipt_headers(envelope: Mapping[str, Any]) -> H.Headers:
    """The x-reach-fanout-of header on the router's receipts of a delivery: the status fold learns its parent."""
    parent = fanout.parent_of(envelope)
    return [(H.FANOUT_OF, parent.encode())] if parent else []


def _child(topic: str, child: dict[str, Any], position: Position) -> Output:
    """A child envelope on its capability's topic, keyed as every capability topic is (session_key, else its id)."""
    key = (child.get("routing") or {}).get("session_key") or child["message_id"]
    return Output(topic, encode_dict("Envelope", child), key=str(key).encode(),
                  headers=[(H.MESSAGE_ID, child["message_id"].encode())], cause=position)
