-- Who changed what: changes per actor and kind, with the first and last time (reach audit sql -f ...).
SELECT actor, kind, count(*) AS changes, min(ts) AS first_at, max(ts) AS last_at
FROM audit
GROUP BY ALL
ORDER BY changes DESC, actor, kind
