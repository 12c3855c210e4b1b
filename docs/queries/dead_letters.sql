-- Dead letters by reason (the DEAD_LETTERED receipt carries the reason as its error code).
SELECT capability, error_code AS reason, count(DISTINCT (message_id, generation)) AS dead_letters
FROM receipts WHERE status = 'DEAD_LETTERED' GROUP BY ALL ORDER BY dead_letters DESC
