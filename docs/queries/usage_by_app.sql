-- Tokens and cost per gateway app and tenant (app_id null: sent to Kafka directly, not through the gateway).
SELECT app_id, tenant, count(*) AS requests, sum(tokens) AS tokens, round(sum(cost), 6) AS cost
FROM usage GROUP BY ALL ORDER BY cost DESC NULLS LAST, tokens DESC
