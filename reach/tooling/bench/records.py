"""Records produced per request: the growth of the namespace's topics' end offsets over a measured window.

Every record any process appends to a topic of the bench's namespace (the request itself, forwards, receipts, the
status changelog, registrations, health) moves its partition's end offset by one (no producer here is
transactional, so there are no control records). The deltas are summed by topic family, the name's first part
after the namespace (`cap`, `agent`, `receipts`, `status`, ...; a faust changelog counts as `changelog`, a bench
mode's own topic by its last part, `requests` or `replies`), and divided by the requests measured: what a request
costs in records, by what it writes. Read with one ListOffsets request for every partition at once, outside the
CPU and broker-request windows.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

Offsets = dict[str, int]
"""topic -> sum of its partitions' end offsets."""


def end_offsets(admin: AdminClient, namespace: str, timeout: float = 15.0) -> Offsets | None:
    """The end offsets of every topic of `namespace`; None when the broker does not answer in time."""
    try:
        topics = admin.list_topics(timeout=timeout).topics
        wanted = {TopicPartition(name, p): OffsetSpec.latest() for name, meta in topics.items()
                  if name.startswith(namespace + ".") or name.startswith(namespace + "-") for p in meta.partitions}
        if not wanted:
            return {}
        out: Offsets = {}
        for tp, future in admin.list_offsets(wanted, request_timeout=timeout).items():
            out[tp.topic] = out.get(tp.topic, 0) + max(future.result(timeout).offset, 0)
        return out
    except Exception:  # noqa: BLE001 - a busy broker: the figure is left out, never guessed
        return None


def family(topic: str, namespace: str) -> str:
    """`cap`, `agent`, `receipts`, ... of `<namespace>.<family>[.<rest>]`; `changelog` for a faust changelog;
    the last part of a bench mode's own `<namespace>.bench.<...>.<part>`."""
    rest = topic.removeprefix(namespace).lstrip(".-")
    if rest.endswith("-changelog"):
        return "changelog"
    if rest.startswith("bench."):  # a mode's own topics (`bench.peers.plain.requests`): their last part
        return rest.rsplit(".", 1)[-1]
    return rest.split(".", 1)[0] or "other"


def per_request(before: Offsets | None, after: Offsets | None, requests: int,
                namespace: str) -> dict[str, float | None]:
    """`records_produced_per_request` and one `records_produced_<family>_per_request` per family that grew."""
    if before is None or after is None or requests <= 0:
        return {}
    grown: dict[str, int] = {}
    for topic, end in after.items():
        delta = end - before.get(topic, 0)
        if delta > 0:
            grown[family(topic, namespace)] = grown.get(family(topic, namespace), 0) + delta
    out: dict[str, float | None] = {"records_produced_per_request": round(sum(grown.values()) / requests, 3)}
    for name in sorted(grown):
        out[f"records_produced_{name}_per_request"] = round(grown[name] / requests, 3)
    return out


def by_family(figures: Mapping[str, float | None]) -> dict[str, float]:
    """The per-family figures of `per_request`, keyed by family."""
    prefix, suffix = "records_produced_", "_per_request"
    return {k[len(prefix):-len(suffix)]: v for k, v in figures.items()
            if k.startswith(prefix) and k.endswith(suffix) and k != "records_produced_per_request" and v is not None}
