-- Every build version change per agent and instance, oldest first (upgrades and rollbacks).
SELECT ts, agent_id, instance_id, before ->> '$' AS from_version, after ->> '$' AS to_version
FROM audit
WHERE kind = 'VERSION'
ORDER BY ts
