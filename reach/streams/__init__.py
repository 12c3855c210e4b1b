"""The stream app: the router's confluent-kafka hot path, its state loop, and the faust app that hosts them."""
