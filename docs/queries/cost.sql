-- Cost per completed message, per capability and agent (what handlers reported with ctx.cost, on their
-- outcome receipts; a result reused through an idempotency_key carries no cost, so only real runs count).
SELECT capability, agent_id,
       count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
       round(sum(coalesce(cost, 0)), 6) AS total_cost,
       round(total_cost / nullif(completed, 0), 6) AS cost_per_completed
FROM receipts WHERE agent_id IS NOT NULL GROUP BY ALL ORDER BY capability, agent_id
