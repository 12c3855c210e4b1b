-- Stale NO_ROUTE letters: dead-lettered for lack of a route over 24 h ago, never completed since.
SELECT capability, count(DISTINCT message_id) AS stale_letters, min(ts) AS oldest
FROM receipts r
WHERE status = 'DEAD_LETTERED' AND error_code = 'NO_ROUTE' AND ts < now()::TIMESTAMP - INTERVAL 24 HOUR
  AND NOT EXISTS (SELECT 1 FROM receipts c WHERE c.message_id = r.message_id AND c.status = 'COMPLETED')
GROUP BY capability ORDER BY stale_letters DESC
