"""The hand-written ROUTED receipt encoder produces exactly the codec's bytes."""

from __future__ import annotations

import random

import pytest

from reach.core.factors import NAMES, FactorWeights
from reach.core.scoring import ScoreParts
from reach.kafka import codec
from reach.streams.router.routed_receipt import RoutedReceiptWriter, as_receipt, varint


def _random_fields(rng: random.Random) -> dict[str, object]:
    n = rng.choice([0, 1, 5, 17, 70])
    scores = [ScoreParts(f"inst-{rng.randrange(10**6)}-ü", f"agent://x/{rng.randrange(9)}", rng.uniform(-2, 2),
                         tuple(rng.choice([0.0, 0.5, 1.0, rng.random()]) for _ in NAMES),
                         rng.choice([None, None, "canary", "stable", "ü" * 70]))
              for _ in range(n)]
    big = rng.choice([0, 1, 63, 64, 127, 128, 2**31 - 1, 2**40, 2**62])
    return dict(
        message_id="".join(rng.choice("ABCXYZ0123é") for _ in range(rng.randrange(0, 40))),
        generation=rng.choice([0, 1, 64, 300]), trace_id=str(rng.random()), tenant=rng.choice(["", "default", "t"]),
        capability="a.b", attempt=rng.choice([1, 2, 200]), at=1_800_000_000_000 + big,
        deadline=rng.choice([None, 0, big]), delivery_timeout_ms=rng.choice([None, 5_000, 2**31 - 1]),
        reroutes=rng.choice([0, 3, 1000]), agent_id="agent://x/1", instance_id="inst-1", scores=scores,
        picked_instance="inst-1", topic=rng.choice(["ns.agent.x.1", "ü" * 100]),
        partition=rng.choice([None, 0, 7, 1023]), offset=rng.choice([None, 0, big]),
        weights=rng.choice([{}, {"fit": 0.4, "locality": 0.2, "load": 0.3, "affinity": 0.1}, FactorWeights(),
                            FactorWeights({"cost": rng.random(), "health": 0.3})]),
        arm=rng.choice([None, "canary", "stable"]), admission=rng.choice([None, "qps: i-2", "é" * 200]),
        callback=rng.choice([None, '{"channel":"webhook","endpoint":"https://h/x","fields":[]}']),
    )


def test_matches_the_codec_on_random_receipts() -> None:
    writer = RoutedReceiptWriter.create()
    assert writer is not None
    rng = random.Random(11)
    for _ in range(500):
        fields = _random_fields(rng)
        encoded = writer.encode(**fields)  # type: ignore[arg-type]
        assert encoded == codec.encode_dict("Receipt", as_receipt(**fields))
        decision = codec.decode_dict("Receipt", encoded)["decision"]
        assert decision["picked_instance"] == "inst-1" and decision["weights"] == dict(fields["weights"])  # type: ignore[call-overload]
        for written, parts in zip(decision["candidates"], fields["scores"], strict=True):  # type: ignore[call-overload]
            assert written["parts"] == parts.parts_map() and written["fit"] == parts.part("fit")
            assert written["arm"] == parts.arm


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 2**31, -(2**31), 2**62])
def test_varint_is_avro_zigzag(n: int) -> None:
    from io import BytesIO

    from fastavro import schemaless_writer

    buf = BytesIO()
    schemaless_writer(buf, "long", n)
    assert varint(n) == buf.getvalue()
