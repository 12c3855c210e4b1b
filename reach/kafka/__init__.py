"""The Kafka plumbing (client construction and commits, delivery and acknowledgements, Avro codec and headers, topic
reading and the topics file, librdkafka errors); everything that talks to a broker goes through it."""
