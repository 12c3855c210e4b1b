-- Routing degradation rate: share of messages that met an OVERLOAD, found every breaker open (UNAVAILABLE)
-- or ended UNROUTABLE / NO_ROUTE.
SELECT capability,
       count(DISTINCT message_id) AS messages,
       count(DISTINCT message_id) FILTER (WHERE error_kind IN ('OVERLOAD', 'UNAVAILABLE') OR status = 'UNROUTABLE'
                                          OR error_code = 'NO_ROUTE') AS degraded,
       round(degraded / messages, 4) AS degradation_rate
FROM receipts GROUP BY capability ORDER BY capability
