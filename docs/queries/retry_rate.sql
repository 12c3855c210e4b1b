-- Retry rate: share of messages (per generation) that had at least one retry scheduled.
SELECT capability,
       count(DISTINCT (message_id, generation)) AS messages,
       count(DISTINCT (message_id, generation)) FILTER (WHERE status = 'RETRY_SCHEDULED') AS retried,
       round(retried / messages, 4) AS retry_rate
FROM receipts GROUP BY capability ORDER BY capability
