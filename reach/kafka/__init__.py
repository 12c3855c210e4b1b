"""The Kafka plumbing: client construction and commits, delivery and acknowledgements, the Avro codec and headers,
topic reading and the topics file, librdkafka errors. New broker-facing code goes here; 37 modules elsewhere still
import confluent_kafka directly (tests/unit/test_boundaries.py holds only that reach.core never does)."""
