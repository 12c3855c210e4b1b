-- Canary against stable: per capability and arm, messages, success rate and routed-to-terminal latency.
-- A message counts for the arm of its first ROUTED receipt (Decision.arm; a retry after a failed canary
-- attempt goes to the stable arm, and the message still counts for the canary arm that first took it).
WITH routed AS (
  SELECT message_id, generation, capability,
         arg_min(arm, kafka_offset) AS arm, min(ts) AS routed_at
  FROM receipts
  WHERE status = 'ROUTED' AND arm IS NOT NULL
  GROUP BY message_id, generation, capability
), terminal AS (
  SELECT message_id, generation,
         arg_min(status, kafka_offset) AS status, min(ts) AS ended_at
  FROM receipts
  WHERE status IN ('COMPLETED', 'FAILED', 'REJECTED', 'UNROUTABLE', 'EXPIRED', 'DEAD_LETTERED')
  GROUP BY message_id, generation
)
SELECT r.capability, r.arm,
       count(*) AS messages,
       count(t.status) AS finished,
       round(avg(CASE WHEN t.status = 'COMPLETED' THEN 1 ELSE 0 END) FILTER (WHERE t.status IS NOT NULL), 4)
         AS success_rate,
       round(quantile_cont(epoch_ms(t.ended_at) - epoch_ms(r.routed_at), 0.95), 1) AS p95_ms
FROM routed r LEFT JOIN terminal t USING (message_id, generation)
GROUP BY r.capability, r.arm ORDER BY r.capability, r.arm
