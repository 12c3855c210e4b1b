-- Callback-effective rate per capability: messages whose receipts carry a callback spec, and the share whose
-- callback reached DELIVERED (a CALLBACKED receipt on the original message). Published target: >= 90%.
WITH with_callback AS (
  SELECT DISTINCT message_id, capability FROM receipts WHERE callback IS NOT NULL AND callback <> ''
),
callbacked AS (
  SELECT DISTINCT message_id FROM receipts WHERE status = 'CALLBACKED'
)
SELECT w.capability,
       count(*) AS with_callback,
       count(c.message_id) AS callbacked,
       round(count(c.message_id) / nullif(count(*), 0), 4) AS callback_effective_rate
FROM with_callback w LEFT JOIN callbacked c ON c.message_id = w.message_id
GROUP BY w.capability ORDER BY w.capability
