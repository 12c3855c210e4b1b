"""The gateway bench's pure parts: signed headers the gateway's own check accepts, the schedule, pooling, the row."""

from __future__ import annotations

import json

from reach import signing
from reach.tooling.bench.gateway import LAG_BOUND_MS, gateway_row
from reach.tooling.bench.gateway_load import LoadResult, schedule, summary
from reach.tooling.bench.gateway_stack import PAYLOAD, SignedApp, envelope_body


def test_the_generators_signature_is_one_the_gateway_accepts() -> None:
    app = SignedApp(app_id="a", key_id="key_1", secret="rs_secret")
    body = envelope_body()
    headers = app.headers(body, now=1_764_590_000)
    sig = signing.parse(headers["Reach-Signature"])
    assert isinstance(sig, signing.Signature) and sig.timestamp == 1_764_590_000 and sig.nonce and sig.v2

    def good(secret: bytes, sent: bytes, target: str = "/v1/envelopes") -> bool:
        return signing.matches_request(secret, sig, method="POST", target=target, body=sent)

    assert good(b"rs_secret", body) and not good(b"rs_other", body)
    assert not good(b"rs_secret", body + b" "), "the signature covers the exact bytes"
    assert not good(b"rs_secret", body, "/v1/invoke"), "and the path"
    assert headers["Reach-Key"] == "key_1" and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"capability": "bench.noop", "version": "*", "payload": PAYLOAD}


def test_schedule_counts_the_warm_up_apart() -> None:
    assert schedule(500, 6, 2) == (4000, 1000)
    assert schedule(50, 1, 0.5) == (75, 25)


def _result(rate: float, first: float, last: float, latencies: list[float], statuses: dict[str, int]) -> LoadResult:
    return LoadResult(rate=rate, due=sum(statuses.values()), statuses=statuses, latencies_ms=latencies,
                      lag_ms=[1.0] * sum(statuses.values()), window_s=2.0, first_sent=first, last_answer=last,
                      cpu_s=0.5, wall_s=4.0)


def test_accepted_per_second_is_over_the_span_of_the_answers_not_the_window() -> None:
    # two generators, 100 requests each in a 2 s window, but the last answer came 4 s after the first send
    pooled = summary([_result(50, 10.0, 13.0, [5.0] * 100, {"202": 100}),
                      _result(50, 10.1, 14.0, [7.0] * 98, {"202": 98, "429": 2})])
    assert (pooled.due, pooled.statuses, pooled.span_s, pooled.cpu_s) == (200, {"202": 198, "429": 2}, 4.0, 1.0)
    row = gateway_row(100, pooled, {"gateway": 1.0}, {"gateway": 1.3}, requests=300)
    assert row.throughput == 198 / 4.0 and row.messages == 198 and row.lost == 0
    assert row.latency is not None and (row.latency.p50, row.latency.max) == (5.0, 7.0)
    assert row.cpu_by_process == {"gateway": 1.0, "load generators": round(1.0 / 300 * 1000, 4)}
    assert row.figures["refused"] == 2 and "refused {'429': 2}" in row.notes
    assert row.figures["generator_cores"] == 0.25 and "bottleneck" not in row.notes


def test_requests_never_answered_are_lost_and_a_late_generator_is_named() -> None:
    late = LoadResult(rate=10, due=20, statuses={"202": 15, "error": 3}, latencies_ms=[1.0] * 15,
                      lag_ms=[LAG_BOUND_MS * 3] * 18, window_s=2.0, first_sent=1.0, last_answer=2.0, cpu_s=1.0,
                      wall_s=1.0)
    row = gateway_row(10, summary([late]), {}, {}, requests=30)
    assert row.lost == 2 and row.figures["refused"] == 3
    assert "the generator was the bottleneck" in row.notes
