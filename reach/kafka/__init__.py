"""The Kafka plumbing: the batch worker every consumer loop runs on (worker.py), client construction and commits,
delivery and acknowledgements, the produce pipeline, the Avro codec (generated from the .avsc) and headers, topic
reading and the topics file, group membership (election.py), librdkafka errors. Runtime modules outside reach.kafka
never import confluent_kafka (tests/unit/test_boundaries.py holds the rule)."""
