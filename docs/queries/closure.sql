-- Closure rate per channel: outbound channel messages (SENT) whose trace got the inbound answer (the reply
-- envelope `<outbound id>-re`, from POST /v1/callbacks/{token}) within 24 hours. Production reference: 88.6%.
WITH outbound AS (
  SELECT message_id, trace_id, capability, min(ts) AS sent_at
  FROM receipts WHERE capability LIKE 'channel.%' AND status = 'SENT'
  GROUP BY message_id, trace_id, capability
),
replies AS (
  SELECT message_id, trace_id, min(ts) AS answered_at FROM receipts
  WHERE message_id LIKE '%-re' GROUP BY message_id, trace_id
)
SELECT o.capability,
       count(*) AS outbound,
       count(r.message_id) AS answered,
       round(count(r.message_id) / nullif(count(*), 0), 4) AS closure_rate
FROM outbound o LEFT JOIN replies r
  ON r.message_id = o.message_id || '-re' AND r.trace_id = o.trace_id
 AND r.answered_at <= o.sent_at + INTERVAL 24 HOUR
GROUP BY o.capability ORDER BY o.capability
