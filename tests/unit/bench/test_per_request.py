"""The per-request figures that do not need a broker: records by topic family, the processes' counters, the rule
that counts runtime modules importing confluent_kafka, and the Redis client's counted connection classes."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry

from reach.envelopes import new_envelope
from reach.kafka import avrogen, codec, receiptbytes
from reach.records import Envelope, Receipt, Status
from reach.redisclient import sync_client
from reach.tooling.bench import imports, metered, records

NS = "bench0a1b2c3d"

EXPOSITION = """# HELP reach_redis_round_trips_total Round trips
# TYPE reach_redis_round_trips_total counter
reach_redis_round_trips_total 120.0
# HELP reach_records_decoded_total Records decoded
# TYPE reach_records_decoded_total counter
reach_records_decoded_total{type="Receipt"} 30.0
reach_records_decoded_total{type="Envelope"} 10.0
# HELP process_cpu_seconds_total CPU
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 3.5
"""


def test_a_topic_belongs_to_the_family_after_the_namespace() -> None:
    assert records.family(f"{NS}.cap.bench.noop", NS) == "cap"
    assert records.family(f"{NS}.agent.bench.noop", NS) == "agent"
    assert records.family(f"{NS}.receipts", NS) == "receipts"
    assert records.family(f"{NS}.router-status-changelog", NS) == "changelog"
    assert records.family(f"{NS}.retry.30s", NS) == "retry"
    assert records.family(f"{NS}.bench.peers.plain.replies", NS) == "replies"


def test_records_per_request_are_end_offset_growth_by_family() -> None:
    before = {f"{NS}.cap.bench.noop": 100, f"{NS}.receipts": 1_000, f"{NS}.status": 50, f"{NS}.registry": 7}
    after = {f"{NS}.cap.bench.noop": 300, f"{NS}.receipts": 1_600, f"{NS}.status": 270, f"{NS}.registry": 7,
             f"{NS}.agent.bench.noop": 200}  # a topic made during the window counts from zero
    figures = records.per_request(before, after, 200, NS)
    assert figures["records_produced_per_request"] == 6.1
    assert records.by_family(figures) == {"agent": 1.0, "cap": 1.0, "receipts": 3.0, "status": 1.1}
    assert records.per_request(None, after, 200, NS) == {}  # unreadable: left out, never guessed
    assert records.per_request(before, after, 0, NS) == {}


def test_counters_are_read_from_an_exposition_summed_over_labels() -> None:
    assert metered.parse(EXPOSITION) == {"reach_redis_round_trips_total": 120.0, "reach_records_decoded_total": 40.0}


def test_counters_per_request_sum_every_process_and_keep_each() -> None:
    before = {"router": {"reach_redis_round_trips_total": 10.0}, "agent": {"reach_redis_round_trips_total": 100.0}}
    after = {"router": {"reach_redis_round_trips_total": 10.0}, "agent": {"reach_redis_round_trips_total": 400.0}}
    assert metered.per_request(before, after, 200) == {"redis_round_trips_per_request": 1.5,
                                                       "redis_round_trips_per_request router": 0.0,
                                                       "redis_round_trips_per_request agent": 1.5}


def test_a_process_that_did_not_answer_leaves_the_counters_out() -> None:
    before = {"router": {"reach_redis_round_trips_total": 10.0}, "agent": None}
    after = {"router": {"reach_redis_round_trips_total": 50.0}, "agent": {"reach_redis_round_trips_total": 9.0}}
    assert metered.per_request(before, after, 10) == {}  # a partial sum would read too low


def test_a_figure_every_process_lacks_or_one_lacks_is_left_out() -> None:
    before: dict[str, dict[str, float] | None] = {
        "router": {"reach_redis_round_trips_total": 0.0},
        "agent": {"reach_redis_round_trips_total": 0.0, "reach_bench_records_decoded_total": 5.0}}
    after: dict[str, dict[str, float] | None] = {
        "router": {"reach_redis_round_trips_total": 0.0},
        "agent": {"reach_redis_round_trips_total": 20.0, "reach_bench_records_decoded_total": 45.0}}
    figures = metered.per_request(before, after, 10)
    assert figures["redis_round_trips_per_request"] == 2.0 and figures["redis_round_trips_per_request router"] == 0
    assert "records_decoded_per_request" not in figures  # the router did not count: no partial sum


def test_decodes_are_read_from_the_process_own_counter_before_the_wrapper_one() -> None:
    def counts(own: float, wrapper: float) -> dict[str, float]:
        return {"reach_redis_round_trips_total": 0.0, "reach_records_decoded_total": own,
                "reach_bench_records_decoded_total": wrapper}

    figures = metered.per_request({"agent": counts(0, 0)}, {"agent": counts(30, 90)}, 10)
    assert figures["records_decoded_per_request"] == 3.0
    wrapper_only = {"agent": {"reach_bench_records_decoded_total": 0.0}}
    assert metered.per_request(wrapper_only, {"agent": {"reach_bench_records_decoded_total": 70.0}}, 10)[
        "records_decoded_per_request"] == 7.0


def test_the_wrapper_counts_what_the_codec_decodes_by_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec.Codec, "decode_dict", codec.Codec.decode_dict)  # restored after the test
    monkeypatch.setattr(avrogen, "reader", avrogen.reader)
    registry = CollectorRegistry()
    metered.count_decodes(registry)
    data = codec.encode(new_envelope("bench.a", {}))
    codec.decode(data, Envelope)
    codec.decode_dict("Envelope", data)
    assert registry.get_sample_value("reach_bench_records_decoded_total", {"record": "Envelope"}) == 2


def test_the_wrapper_counts_what_the_generated_readers_decode_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The router's envelopes and every receipt the fold and the feed read go through readers generated from the
    .avsc, not the codec: each is counted once, and bytes a reader gives up on are counted once, by the codec."""
    monkeypatch.setattr(codec.Codec, "decode_dict", codec.Codec.decode_dict)
    monkeypatch.setattr(avrogen, "reader", avrogen.reader)
    monkeypatch.setattr(avrogen, "_readers", {})  # readers made after the wrapper, as in a metered process
    monkeypatch.setattr(receiptbytes, "_reader", None)
    registry = CollectorRegistry()
    metered.count_decodes(registry)
    envelope = codec.encode(new_envelope("bench.a", {}))
    receipt = codec.encode(Receipt(message_id="m", trace_id="t", tenant="default", capability="bench.a",
                                   status=Status.COMPLETED, at=1))
    assert avrogen.decode_dict("Envelope", envelope)["capability"] == "bench.a"
    assert receiptbytes.decode_receipt(receipt)["status"] == "COMPLETED"
    assert receiptbytes.decode_receipt(receipt)["message_id"] == "m"
    with pytest.raises(codec.DecodeError):
        receiptbytes.decode_receipt(receipt[:-3])  # the reader gives up, the codec reads and refuses it
    count = registry.get_sample_value
    assert count("reach_bench_records_decoded_total", {"record": "Envelope"}) == 1
    assert count("reach_bench_records_decoded_total", {"record": "Receipt"}) == 3


def test_the_import_rule_counts_runtime_modules_only(tmp_path: Path) -> None:
    package = tmp_path / "reach"
    for path, source in {
        "a.py": "import confluent_kafka\n",
        "b.py": "def f():\n    from confluent_kafka.admin import AdminClient\n",
        "c.py": "from reach.kafka import clients\n",  # through the Kafka layer: fine
        "kafka/clients.py": "from confluent_kafka import Consumer\n",  # the Kafka layer itself
        "tooling/bench/raw.py": "from confluent_kafka import Consumer\n",  # tooling is not runtime
        "d.py": "import confluent_kafka_helpers\n",  # another package
    }.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(source)
    assert imports.offenders(package) == ("reach/a.py", "reach/b.py")


def test_the_redis_client_counts_through_a_subclass_of_the_class_the_url_chose() -> None:
    plain = sync_client("redis://127.0.0.1:1/0")
    tls = sync_client("rediss://127.0.0.1:1/0")
    assert isinstance(plain, redis.Redis) and isinstance(tls, redis.Redis)
    assert issubclass(plain.connection_pool.connection_class, redis.Connection)
    assert plain.connection_pool.connection_class is not redis.Connection
    assert issubclass(tls.connection_pool.connection_class, redis.SSLConnection)  # TLS kept, counted too
