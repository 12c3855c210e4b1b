"""The product's marks on an envelope (pure): `reach-*` Envelope headers are set by the product, never by a caller.

A new envelope keeps none of a caller's `reach-*` headers: `new_envelope`, which the Python client, a handler's
sends, the gateway, A2A, MCP and channel replies all build with, drops them. An envelope the caller built and
publishes itself (`Client.publish`) is checked for the lineage marks, the headers by which the router and the status
fold recognise a child they derived (a fan-out delivery `reach-fanout-of`, a subscriber's notification
`reach-notify-of`, a fallback child `reach-fallback-of` and `reach-fallback-depth`): each survives only when the
envelope's id is the id derived from the message it names (a delivery `<parent>-s<generation>-<agent path>` and a
notification `<parent>-n<generation>-<agent path>` sent to that agent, a fallback child `<parent>-fb<generation>`),
so an envelope the product made, published again (a dead letter replayed, a next turn), keeps its marks and a forged
one names nothing. The marks a next turn carries about its own message (reach.core.turns: the conversation, the
instance that asked) name no other message and travel on. The router and the status fold check the same derivations
on what they read (reach.core.fanout.parent_of, fanout.foreign); docs/decisions/0045."""

from __future__ import annotations

from collections.abc import Mapping

from reach.core import fallback, fanout

PREFIX = "reach-"
LINEAGE = frozenset({fanout.OF_HEADER, fanout.NOTIFY_HEADER, fallback.OF_HEADER, fallback.DEPTH_HEADER})


def kept(headers: Mapping[str, str] | None, *, message_id: str | None, to_agent: str | None) -> dict[str, str]:
    """The headers the envelope (its id `message_id`; None: a new envelope) may carry: no `reach-*` one on a new
    envelope; on a built one, every header but the lineage marks its id does not prove."""
    if not message_id:
        return {k: v for k, v in (headers or {}).items() if not k.lower().startswith(PREFIX)}
    out = {k: v for k, v in (headers or {}).items() if k.lower() not in LINEAGE}
    if not headers:
        return out
    delivery = fanout.verified_parent(message_id, to_agent, headers.get(fanout.OF_HEADER))
    if delivery is not None:
        out[fanout.OF_HEADER] = delivery
    observed = fanout.notified_of(message_id, to_agent, headers.get(fanout.NOTIFY_HEADER))
    if observed is not None:  # a subscriber's notification (docs/decisions/0076)
        out[fanout.NOTIFY_HEADER] = observed
    served = fallback.verified_parent(message_id, headers.get(fallback.OF_HEADER))
    if served is not None:
        out[fallback.OF_HEADER] = served
    if (delivery or served) and (hops := headers.get(fallback.DEPTH_HEADER)) is not None:
        out[fallback.DEPTH_HEADER] = hops  # a delivery of a fallback child is as deep as the child
    return out
