"""`reach bench`: raw Kafka, plain faust, the router, the round trip and scoring measured side by side in one run."""
