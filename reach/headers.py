"""Kafka header names Agent-Reach reads and writes, in one place."""

TRACEPARENT = "traceparent"            # W3C trace context (opentelemetry propagator)
TRACESTATE = "tracestate"
ORIGIN_TOPIC = "x-reach-origin-topic"  # provenance of a dead letter
ORIGIN_PARTITION = "x-reach-origin-partition"
ORIGIN_OFFSET = "x-reach-origin-offset"
REASON = "x-reach-reason"              # why a record was dead-lettered
MESSAGE_ID = "x-reach-message-id"      # lets consumers skip decoding for bookkeeping
DUE_AT = "x-reach-due-at"              # epoch ms a record on a delay tier is due
TARGET = "x-reach-target"              # the capability topic a delay tier republishes to
ROUTER = "x-reach-router"              # the routing worker that wrote a ROUTED receipt (its state loop skips it)
REPLY_TO = "x-reach-reply-to"          # the envelope's reply_to, on the router's receipts (the status fold replies)

Headers = list[tuple[str, str | bytes | None]]
"""Kafka headers as confluent-kafka's producer takes them."""
