-- Tokens and cost per capability and model (the `usage` view: each request's terminal receipt that carried usage,
-- once per message generation; cost in units of REACH_CURRENCY).
SELECT capability, model, count(*) AS requests, sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens, sum(tokens) AS tokens, round(sum(cost), 6) AS cost, any_value(currency) AS currency
FROM usage GROUP BY ALL ORDER BY cost DESC NULLS LAST, tokens DESC
