"""`reach receipts sql`'s `usage` view and the ready usage queries on a known run: each request counted once."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach import analytics
from reach.records import Receipt, Status, Usage

QUERIES = Path(__file__).resolve().parents[2] / "docs" / "queries"
DAY = 86_400_000
AT = 1_796_256_000_000  # 2026-12-03T00:00Z


def receipt(mid: str, status: Status, *, at: int = AT, capability: str = "demo.llm", usage: Usage | None = None,
            tenant: str = "acme", agent: str = "agent://demo/llm") -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant=tenant, capability=capability, status=status, at=at,
                   agent_id=agent, usage=usage)


def used(source: str = "gateway:app_1", cost: int = 2_000) -> Usage:
    return Usage(input_tokens=100, output_tokens=50, model="m", cost_micros=cost, currency="USD", source=source)


def known_run() -> list[tuple[Receipt, int]]:
    """Three demo.llm requests (two completed, one failed; one terminal republished), one other tenant's on the
    next day sent to Kafka directly, and one request without usage; with their offsets."""
    rows = [
        receipt("a", Status.STARTED), receipt("a", Status.COMPLETED, usage=used()),
        receipt("a", Status.COMPLETED, usage=used()),  # the agent republished its cached terminal
        receipt("b", Status.COMPLETED, usage=used()),
        receipt("c", Status.FAILED, usage=used(cost=1_000)),
        receipt("d", Status.COMPLETED, at=AT + DAY, tenant="other", usage=used(source="batch-job")),
        receipt("e", Status.COMPLETED, capability="demo.echo"),
    ]
    return [(r, n) for n, r in enumerate(rows)]


def run(sql: str, tmp_path: Path) -> list[tuple[object, ...]]:
    flat = ({**analytics.flatten(r), "kafka_partition": 0, "kafka_offset": n} for r, n in known_run())
    con = analytics.load(flat, tmp_path)
    return analytics.query(con, sql)[1]


def test_the_usage_view_has_one_row_per_request_that_reported_usage(tmp_path: Path) -> None:
    assert run("SELECT message_id, app_id, tokens, cost FROM usage ORDER BY 1", tmp_path) == [
        ("a", "app_1", 150, 0.002), ("b", "app_1", 150, 0.002), ("c", "app_1", 150, 0.001), ("d", None, 150, 0.002)]


def test_the_ready_queries_sum_each_request_once(tmp_path: Path) -> None:
    def ready(name: str) -> list[tuple[object, ...]]:
        return run((QUERIES / name).read_text(), tmp_path)

    assert ready("usage_by_capability.sql") == [("demo.llm", "m", 4, 400, 200, 600, 0.007, "USD")]
    assert ready("usage_by_agent.sql") == [("agent://demo/llm", "demo.llm", 4, 400, 200, 0.007)]
    assert ready("usage_by_app.sql") == [("app_1", "acme", 3, 450, 0.005), (None, "other", 1, 150, 0.002)]
    assert ready("usage_by_tenant.sql") == [("acme", 3, 300, 150, 0.005), ("other", 1, 100, 50, 0.002)]
    assert [(str(day), tokens) for day, _cap, _n, tokens, _cost in ready("usage_by_day.sql")] == [
        ("2026-12-03", 450), ("2026-12-04", 150)]
    # 3 completed requests paid for 4 runs: 0.007 / 3
    assert ready("cost_per_success.sql") == [("demo.llm", 3, 0.001, 0.007, 0.002333, 200.0)]


def test_the_usage_view_shows_what_a_requests_children_spent(tmp_path: Path) -> None:
    parent = receipt("p", Status.COMPLETED, usage=used()).model_copy(update={"timings": {
        "run_ms": 5, "children_input_tokens": 200, "children_output_tokens": 100, "children_cost_micros": 4_000,
        "children": 2}})
    con = analytics.load(iter([{**analytics.flatten(parent), "kafka_partition": 0, "kafka_offset": 0},
                               {**analytics.flatten(receipt("q", Status.COMPLETED, usage=used())),
                                "kafka_partition": 0, "kafka_offset": 1}]), tmp_path)
    rows = analytics.query(con, "SELECT message_id, tokens, children_tokens, children_cost_micros, "
                                "tokens + children_tokens FROM usage ORDER BY 1")[1]
    assert rows == [("p", 150, 300, 4_000, 450), ("q", 150, 0, 0, 150)]


@pytest.mark.parametrize("statement", [
    "SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_text('/etc/hostname')",
    "COPY (SELECT 1) TO '/tmp/reach-sql-escape.csv'", "INSTALL httpfs", "ATTACH '/tmp/reach-sql-escape.db'",
    "SET enable_external_access = true",
])
def test_a_users_sql_has_no_file_or_network_access(tmp_path: Path, statement: str) -> None:
    """Issue 37: `reach receipts sql` / `reach audit sql` ran DuckDB with file and network access."""
    con = analytics.load(iter([one()]), tmp_path)
    with pytest.raises(analytics.QueryError):
        analytics.query(con, statement)
    assert not Path("/tmp/reach-sql-escape.csv").exists()
    assert analytics.query(con, "SELECT count(*) FROM receipts")[1] == [(1,)]


def one() -> dict[str, object]:
    return {**analytics.flatten(receipt("m1", Status.COMPLETED)), "kafka_partition": 0, "kafka_offset": 0}


def test_out_is_written_as_a_quoted_path_and_no_other_file(tmp_path: Path) -> None:
    """The --out path was put into the SQL unquoted: a quote in it ended the literal."""
    out = tmp_path / "it's here.csv"
    con = analytics.load(iter([one()]), tmp_path)
    analytics.export(con, "SELECT message_id FROM receipts", "csv", out)
    assert out.read_text().splitlines() == ["message_id", "m1"]
    other = tmp_path / "other.csv"
    with pytest.raises(analytics.QueryError):
        analytics.export(con, f"SELECT 1) TO '{other}' (FORMAT CSV); COPY (SELECT 1", "csv", out)
    assert not other.exists()
