-- Delivery states per channel: outbound channel messages (SENT) and how many of them the provider reported
-- DELIVERED, READ (an IM read / acknowledgement) and BOUNCED (an email DSN, an undelivered SMS), with the rates
-- (docs/channels.md, Delivery reports). A message counts once per state, however many reports came.
WITH steps AS (
  SELECT capability, message_id,
         max(CASE WHEN status = 'SENT' THEN 1 ELSE 0 END) AS sent,
         max(CASE WHEN status = 'DELIVERED' THEN 1 ELSE 0 END) AS delivered,
         max(CASE WHEN status = 'READ' THEN 1 ELSE 0 END) AS read,
         max(CASE WHEN status = 'BOUNCED' THEN 1 ELSE 0 END) AS bounced
  FROM receipts WHERE capability LIKE 'channel.%' AND status IN ('SENT', 'DELIVERED', 'READ', 'BOUNCED')
  GROUP BY capability, message_id
)
SELECT capability,
       sum(sent) AS sent,
       sum(delivered) AS delivered,
       sum(read) AS read,
       sum(bounced) AS bounced,
       round(sum(delivered) / nullif(sum(sent), 0), 4) AS delivered_rate,
       round(sum(read) / nullif(sum(sent), 0), 4) AS read_rate,
       round(sum(bounced) / nullif(sum(sent), 0), 4) AS bounce_rate
FROM steps WHERE sent = 1
GROUP BY capability ORDER BY capability
