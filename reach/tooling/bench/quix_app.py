"""The Quix Streams forwarder, run by the interpreter of its own virtual environment (it never imports reach).

    python quix_app.py BOOTSTRAP GROUP SOURCE SINK

Quix's defaults, as a user of it would write the forward (plus the librdkafka security keys of
KafkaSettings, passed as JSON in REACH_BENCH_KAFKA_SECURITY, never on the command line); keys and
values stay bytes (no decode), as in the raw and faust modes. SIGTERM stops it (Quix commits what it
processed, then exits).
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    from quixstreams import Application

    bootstrap, group, source, sink = argv
    security = json.loads(os.environ.get("REACH_BENCH_KAFKA_SECURITY", "{}"))
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      auto_create_topics=False, loglevel="WARNING",
                      consumer_extra_config=security, producer_extra_config=security)
    inbound = app.topic(source, key_deserializer="bytes", value_deserializer="bytes")
    outbound = app.topic(sink, key_serializer="bytes", value_serializer="bytes")
    app.dataframe(inbound).to_topic(outbound)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
