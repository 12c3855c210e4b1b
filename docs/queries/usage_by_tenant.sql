-- Tokens and cost per tenant.
SELECT tenant, count(*) AS requests, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       round(sum(cost), 6) AS cost
FROM usage GROUP BY ALL ORDER BY cost DESC NULLS LAST, tenant
