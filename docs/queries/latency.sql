-- Delivery latency (ROUTED -> STARTED) and execution latency (STARTED -> end of attempt), p50/p95/p99 in ms.
-- A run that ended within the agent's start grace sent no STARTED: its ending carries the start in timings.started_at.
WITH attempts AS (
  SELECT capability, message_id, generation, attempt,
         min(ts) FILTER (WHERE status = 'ROUTED') AS routed,
         coalesce(min(ts) FILTER (WHERE status = 'STARTED'),
                  min(make_timestamp(CAST(json_extract(timings, '$.started_at') AS BIGINT) * 1000))
                    FILTER (WHERE json_extract(timings, '$.started_at') IS NOT NULL)) AS started,
         min(ts) FILTER (WHERE status IN ('COMPLETED', 'FAILED', 'ATTEMPT_FAILED', 'REJECTED')) AS ended
  FROM receipts GROUP BY capability, message_id, generation, attempt
)
SELECT capability,
       quantile_cont(date_diff('millisecond', routed, started), 0.50) AS delivery_p50_ms,
       quantile_cont(date_diff('millisecond', routed, started), 0.95) AS delivery_p95_ms,
       quantile_cont(date_diff('millisecond', routed, started), 0.99) AS delivery_p99_ms,
       quantile_cont(date_diff('millisecond', started, ended), 0.50) AS execution_p50_ms,
       quantile_cont(date_diff('millisecond', started, ended), 0.95) AS execution_p95_ms,
       quantile_cont(date_diff('millisecond', started, ended), 0.99) AS execution_p99_ms
FROM attempts GROUP BY capability ORDER BY capability
