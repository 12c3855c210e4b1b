-- Unit cost: what each successful (COMPLETED) request cost on average, per capability. Failed runs cost too:
-- `spent_on_failures` is what requests that did not complete cost, and `cost_per_success` carries it.
SELECT capability, count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
       round(sum(cost) FILTER (WHERE status <> 'COMPLETED'), 6) AS spent_on_failures,
       round(sum(cost), 6) AS cost,
       round(sum(cost) / nullif(count(*) FILTER (WHERE status = 'COMPLETED'), 0), 6) AS cost_per_success,
       round(sum(tokens) / nullif(count(*) FILTER (WHERE status = 'COMPLETED'), 0), 1) AS tokens_per_success
FROM usage GROUP BY ALL ORDER BY capability
