"""The product's marks on an envelope (pure): `reach-*` Envelope headers are set by the router and the status fold on
the children they derive (a fan-out delivery, a fallback child), never by a caller.

A caller's `reach-*` headers are dropped at every intake that takes headers from a caller (`new_envelope`, which
the Python client, a handler's sends, the gateway, A2A and MCP all build with, and `Client.publish` of an envelope
the caller built). What survives is only a mark whose envelope id is the id derived from the message it names (a
delivery `<parent>-s<generation>-<agent path>` sent to that agent, a fallback child `<parent>-fb<generation>`): an
envelope the product made, published again (a dead letter replayed, a next turn), keeps its marks. The router
and the status fold check the same derivation on what they read (reach.core.fanout.parent_of, fanout.foreign)."""

from __future__ import annotations

from collections.abc import Mapping

from reach.core import fallback, fanout

PREFIX = "reach-"


def kept(headers: Mapping[str, str] | None, *, message_id: str | None, to_agent: str | None) -> dict[str, str]:
    """The headers without the `reach-*` ones the envelope (its id `message_id`, None: not made yet) cannot carry:
    every one on a new envelope, the product's own marks only on a child derived as they say."""
    out = {k: v for k, v in (headers or {}).items() if not k.lower().startswith(PREFIX)}
    if not message_id or not headers:
        return out
    delivery = fanout.verified_parent(message_id, to_agent, headers.get(fanout.OF_HEADER))
    if delivery is not None:
        out[fanout.OF_HEADER] = delivery
    served = fallback.verified_parent(message_id, headers.get(fallback.OF_HEADER))
    if served is not None:
        out[fallback.OF_HEADER] = served
    if (delivery or served) and (hops := headers.get(fallback.DEPTH_HEADER)) is not None:
        out[fallback.DEPTH_HEADER] = hops  # a delivery of a fallback child is as deep as the child
    return out
