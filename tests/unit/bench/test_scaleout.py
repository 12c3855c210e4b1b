"""The scaleout mode's pure parts: the ledger's repeated side effects and the CPU figures by tier."""

from __future__ import annotations

from pathlib import Path

from reach.tooling.bench.scaleout import _figures, _net_of_idle, double_side_effects, double_terminal


def test_a_repeated_message_and_generation_is_a_double_side_effect(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    ledger.write_text("m-1 1 i1\nm-2 1 i1\nm-2 1 i2\nm-3 1 i1\nm-3 2 i2\nwarm-1 1 i1\nwarm-1 1 i1\n")
    # m-2 ran twice for generation 1; m-3's second generation is a retry, not a repeat; warm-1 is not this step's
    assert double_side_effects(ledger, {"m-1", "m-2", "m-3"}) == 1


def test_cpu_figures_sum_the_route_processes_and_keep_the_tiers_apart() -> None:
    per_process: dict[str, float | None] = {
        "router route 1": 0.5, "router route 1/77": 0.1, "router route 2": 0.4, "router status": 0.3,
        "agent 1": 0.2, "agent 2": 0.25}
    f = _figures(per_process, route_processes=2)
    assert f["route_processes"] == 2.0
    assert f["router_cpu_ms_per_request"] == 1.0  # both route processes with what they spawned
    assert f["router_cpu_ms_per_request_max"] == 0.6 and f["router_cpu_ms_per_request_min"] == 0.4
    assert f["status_cpu_ms_per_request"] == 0.3 and f["agents_cpu_ms_per_request"] == 0.45


def test_a_process_that_could_not_be_read_makes_its_tier_unknown() -> None:
    f = _figures({"router route 1": None, "router route 2": 0.4, "router status": 0.3}, route_processes=2)
    assert f["router_cpu_ms_per_request"] is None and f["router_cpu_ms_per_request_max"] == 0.4
    assert f["agents_cpu_ms_per_request"] is None


def test_the_marginal_cost_is_the_total_less_the_idle_spend_over_the_steps_wall_time() -> None:
    # 3,000 requests at 1.0 ms each = 3 CPU s; 40 ms/s idle over 25 s = 1 CPU s: 2 CPU s for the requests
    f = _net_of_idle(1.0, 0.04, 25.0, 3000)
    assert f["router_idle_cpu_ms_per_s"] == 40.0 and f["router_marginal_cpu_ms_per_request"] == 0.6667
    assert _net_of_idle(None, 0.04, 25.0, 3000)["router_marginal_cpu_ms_per_request"] is None


def test_two_different_terminals_of_one_generation_are_a_double_terminal_and_a_repeat_is_not() -> None:
    receipts = [{"message_id": "a", "generation": 1, "status": "ROUTED"},
                {"message_id": "a", "generation": 1, "status": "COMPLETED"},
                {"message_id": "a", "generation": 1, "status": "COMPLETED"},  # delivered twice, the same ending
                {"message_id": "b", "generation": 1, "status": "COMPLETED"},
                {"message_id": "b", "generation": 1, "status": "FAILED"},
                {"message_id": "c", "generation": 1, "status": "FAILED"},
                {"message_id": "c", "generation": 2, "status": "COMPLETED"}]  # a retry's new generation
    assert double_terminal(receipts, {"a", "b", "c"}) == 1
    assert double_terminal(receipts, {"a", "c"}) == 0
