"""`reach bench`: raw Kafka, plain faust, Quix Streams, the router (1 and 2 workers), round trips, the knee search,
status-table scale and scoring, measured side by side in one run, with CPU per process."""
