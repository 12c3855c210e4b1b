"""`reach local up --tls --brokers 3`: a three-node KRaft cluster with every hop on TLS. Each node's only client
listener is SASL_SSL, the nodes replicate over it (it is also the inter-broker listener) and the controller quorum
runs on mutual TLS: a write acknowledged by all three replicas (min.insync.replicas 3, acks=all) proves the
replication ran over SASL_SSL, and the CLI and a consumer work with the printed exports. No listener answers
plaintext Kafka.

The cluster is this module's own (a private REACH_HOME, free ports), stopped at teardown; the shared dev broker is
never touched. docs/decisions/0038-tls-and-auth-on-every-hop.md.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from reach.tooling.local import LocalInfra
from tests.integration.local_support import answer_to_plaintext, clean_env, kafka_settings, reach, with_namespace

RECORDS = 20


@contextmanager
def tls_cluster(home: Path) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """`reach local up --tls --brokers 3` under `home`: (the clean environment, the exports it printed). Stopped
    without the nodes' controlled shutdowns (three at once wait ~15 s on each other): the home is thrown away."""
    base = clean_env(home)
    try:
        up = reach(base, "local", "up", "--tls", "--brokers", "3")
        assert up.returncode == 0, up.stderr
        yield base, dict(line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines())
    finally:
        LocalInfra(home).down(grace_s=3)


@pytest.mark.timeout(420)  # three JVMs start with TLS (~40 s idle) beside the parallel part's other tests
def test_a_tls_cluster_replicates_over_sasl_ssl_and_speaks_nothing_else(tmp_path: Path) -> None:
    with tls_cluster(tmp_path / "home") as (base, exports):
        env = {**base, **exports}
        listeners = exports["REACH_BOOTSTRAP"].split(",")
        assert len(listeners) == 3 and exports["REACH_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert Path(exports["REACH_SSL_CA_FILE"]).is_file() and exports["REACH_REDIS_URL"].startswith("rediss://")
        shown = reach(env, "local", "status", "--json")
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["brokers"] == 3 and status["tls"]["security_protocol"] == "SASL_SSL" and status["running"]

        kafka = kafka_settings(env)
        admin = AdminClient(kafka.admin())
        topic = "tls-cluster-" + uuid.uuid4().hex[:8]
        created = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3,
                                                config={"min.insync.replicas": "3"})])
        created[topic].result(timeout=60)
        producer = Producer(kafka.producer())  # acks=all
        failures: list[str] = []
        for n in range(RECORDS):  # each is acknowledged only once both followers fetched it over SASL_SSL
            producer.produce(topic, key=str(n).encode(), value=f"record {n}".encode(),
                             on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
        assert producer.flush(60) == 0 and failures == [], failures

        described = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
        assert all(len(p.isr) == 3 for p in described.partitions), [(p.id, [b.id for b in p.isr])
                                                                   for p in described.partitions]
        consumer = Consumer(kafka.consumer("tls-cluster-" + uuid.uuid4().hex[:8]))  # from the earliest offset
        consumer.subscribe([topic])
        got: set[bytes] = set()
        try:
            for _ in range(120):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None and msg.value() is not None:
                    got.add(msg.value())
                if len(got) == RECORDS:
                    break
        finally:
            consumer.close()
        assert got == {f"record {n}".encode() for n in range(RECORDS)}

        with_namespace(env)  # `reach topics apply` over SASL_SSL against the three nodes
        for listener in listeners:
            assert answer_to_plaintext(int(listener.rsplit(":", 1)[1])) in (b"", b"\x15"), listener
        local = json.loads((Path(base["REACH_HOME"]) / "local.json").read_text())
        for node in local["nodes"]:  # the quorum's listeners too: TLS with client certificates, never plaintext
            assert answer_to_plaintext(int(node["controller_port"])) in (b"", b"\x15"), node
