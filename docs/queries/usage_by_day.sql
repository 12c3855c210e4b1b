-- Tokens and cost per day (UTC) and capability: the periods `--limit-... /day` counts in.
SELECT day, capability, count(*) AS requests, sum(tokens) AS tokens, round(sum(cost), 6) AS cost
FROM usage GROUP BY ALL ORDER BY day, capability
