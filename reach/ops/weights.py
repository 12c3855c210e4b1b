"""The router's scoring weights per scope: merging a change (a preset, then single factors) into the weights in
effect, publishing it on the control topic, and previewing how many recent routing decisions it would change."""

from __future__ import annotations

from collections.abc import Mapping

from reach import control
from reach.core.factors import PRESETS, FactorWeights, preset
from reach.core.preview import Preview, preview
from reach.envelopes import now_ms
from reach.errors import ReachError
from reach.kafka import codec, topicreader
from reach.kafka.codec import DecodeError
from reach.names import Names
from reach.records import Control, Receipt
from reach.settings import KafkaSettings

PREVIEW_WINDOW_MS = 15 * 60_000
PREVIEW_SAMPLE = 500


class BadWeights(ReachError):
    """Weights must be finite, non-negative and not all zero."""


def merged(current: FactorWeights, changes: Mapping[str, float | None], *, preset_name: str | None = None
           ) -> FactorWeights:
    """`current` with a preset applied (every factor) and then the given weights replaced; BadWeights when the
    result cannot score (NaN, inf, < 0, all 0) or the preset does not exist."""
    base = current
    if preset_name is not None:
        if preset_name not in PRESETS:
            raise BadWeights(f"There is no weights preset {preset_name!r}. Use one of: {', '.join(PRESETS)}.")
        base = current.replaced(preset(preset_name))
    new = base.replaced({k: v for k, v in changes.items() if v is not None})
    problem = control.weights_problem(new)
    if problem is not None:
        raise BadWeights(f"{problem[0].upper()}{problem[1:]}. Pass numbers like --load 0.3.")
    return new


def changed(scope: str, changes: Mapping[str, float | None], *, names: Names, kafka: KafkaSettings,
            preset_name: str | None = None) -> FactorWeights:
    """The weights in effect for `scope` on the control topic with the change merged in (nothing published)."""
    return merged(control.read_control(names=names, kafka=kafka).weights(scope), changes, preset_name=preset_name)


def publish(scope: str, new: FactorWeights, *, by: str, names: Names, kafka: KafkaSettings) -> Control:
    """Publish `new` as the weights of `scope` (routers apply them live): the record published."""
    record = control.weights_record(new.to_record(), scope=scope, by=by)
    control.publish(record, names=names, kafka=kafka)
    return record


def preview_change(scope: str, new: FactorWeights, *, names: Names, kafka: KafkaSettings) -> Preview:
    """The ROUTED decisions of the last PREVIEW_WINDOW_MS (at most PREVIEW_SAMPLE, of `scope`'s capability unless
    it is `*`) re-scored under `new` (reach.core.preview)."""
    now = now_ms()
    receipts = _routed(now - PREVIEW_WINDOW_MS, now, names=names, kafka=kafka)
    return preview(receipts, new, capability=None if scope == "*" else scope, limit=PREVIEW_SAMPLE)


def _routed(since_ms: int, until_ms: int, *, names: Names, kafka: KafkaSettings) -> list[Receipt]:
    """The receipts in the window that carry a routing decision with candidates."""
    reader = topicreader.open_reader("console-preview", kafka)
    out: list[Receipt] = []
    try:
        starts = topicreader.start_offsets(reader, names.receipts, since_ms, 5.0)
        for msg in topicreader.read_range(reader, names.receipts, starts, until_ms=until_ms, idle_timeout=5.0):
            try:
                receipt = codec.decode(msg.value() or b"", Receipt)
            except DecodeError:
                continue
            if receipt.decision is not None and receipt.decision.candidates:
                out.append(receipt)
    finally:
        reader.close()
    return out
