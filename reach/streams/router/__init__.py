"""The routing worker: reads capability topics, scores instances and forwards each envelope to one
inbox (`route_loop`), with the state it routes from (`state`), the capability-topic discovery
(`captopics`), session affinity, per-agent QPS limits, the ROUTED receipt fast path and its stats."""
