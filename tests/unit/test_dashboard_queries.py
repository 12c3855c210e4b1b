"""The PromQL reader the dashboard check uses (tests/dashboard_queries.py): names and labels, never functions,
keywords, strings or durations; and every panel of the dashboard has a query it can read."""

from __future__ import annotations

import pytest

from tests.dashboard_queries import dashboard_queries, series


def test_metric_names_and_their_labels() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, capability) (rate(agentreach_delivery_latency_seconds_bucket[5m])))'
            ' / on (capability) group_left sum without (instance) (agentreach_ready_instances{state!~"DOWN|x"} '
            'offset 5m) > bool 0.5 and agentreach_agents unless vector(1)')
    found = series(expr)
    assert set(found) == {"agentreach_delivery_latency_seconds_bucket", "agentreach_ready_instances",
                          "agentreach_agents"}
    assert found["agentreach_ready_instances"].labels == {"state", "le", "capability", "instance"}


def test_strings_and_numbers_are_not_series() -> None:
    found = series('sum by (capability) (rate(agentreach_deliveries_total{outcome="in_time", x=\'or\'}[15m])) * 0 '
                   'or label_replace(agentreach_agents, "dst", "$1", "src", "(.*)") > 1e3')
    assert set(found) == {"agentreach_deliveries_total", "agentreach_agents"}
    assert {"outcome", "x", "capability"} <= found["agentreach_deliveries_total"].labels


def test_a_selector_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no metric name"):
        series('{__name__=~"agentreach_.*"}')


def test_every_panel_query_reads_at_least_one_series() -> None:
    queries = dashboard_queries()
    assert queries
    for title, expr in queries:
        assert series(expr), (title, expr)
