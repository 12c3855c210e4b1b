-- Operator changes of the control plane (weights, drains, policy, canaries, intent maps, apps, operators),
-- newest first, with the value before and after.
SELECT ts, actor, kind, subject, before, after
FROM audit
WHERE kind IN ('WEIGHTS', 'INSTANCE', 'POLICY', 'CANARY', 'INTENT', 'APP', 'OPERATOR')
ORDER BY ts DESC
