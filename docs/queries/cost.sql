-- Cost per completed message, per capability and agent (cost as reported on receipts).
SELECT capability, agent_id,
       count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
       round(sum(coalesce(cost, 0)), 6) AS total_cost,
       round(total_cost / nullif(completed, 0), 6) AS cost_per_completed
FROM receipts WHERE agent_id IS NOT NULL GROUP BY ALL ORDER BY capability, agent_id
