-- Success rate and first-attempt success rate per capability (first terminal receipt per message and generation).
WITH terminal AS (
  SELECT message_id, generation, capability,
         arg_min(status, kafka_offset) AS status, arg_min(attempt, kafka_offset) AS attempt
  FROM receipts
  WHERE status IN ('COMPLETED', 'FAILED', 'REJECTED', 'UNROUTABLE', 'EXPIRED', 'DEAD_LETTERED')
  GROUP BY message_id, generation, capability
)
SELECT capability,
       count(*) AS messages,
       round(avg(CASE WHEN status = 'COMPLETED' THEN 1 ELSE 0 END), 4) AS success_rate,
       round(avg(CASE WHEN status = 'COMPLETED' AND attempt = 1 THEN 1 ELSE 0 END), 4) AS first_attempt_success_rate
FROM terminal GROUP BY capability ORDER BY capability
