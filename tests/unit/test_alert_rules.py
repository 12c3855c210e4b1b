"""docker/prometheus/alerts.yml: `promtool test rules` passes (each closure alert firing and not firing), and every
metric an alert or a dashboard panel reads is one the code exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from reach.metrics import Metrics

DOCKER = Path(__file__).resolve().parents[2] / "docker"
RULES, RULE_TESTS = DOCKER / "prometheus" / "alerts.yml", DOCKER / "prometheus" / "alerts_test.yml"
DASHBOARD = DOCKER / "grafana" / "agentreach-dashboard.json"
CLOSURE_ALERTS = {"AgentReachCallbackEffectiveRateLow", "AgentReachDeliverySuccessLow"}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "no promtool: apt-get install -y --no-install-recommends prometheus (.ci/run and scripts/setup.sh do)"
        if os.environ.get("REACH_CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    promtool = _promtool()
    for args in (("check", "rules", str(RULES)), ("test", "rules", str(RULE_TESTS))):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def test_each_closure_alert_has_a_firing_and_a_not_firing_case() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert {name: cases.get(name) for name in CLOSURE_ALERTS} == {name: {True, False} for name in CLOSURE_ALERTS}


def _exported() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_sum", "_count"))
    return names


def test_the_closure_alerts_and_panels_read_metrics_the_status_fold_exports() -> None:
    rules = {r["alert"]: r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    panels = json.dumps(json.loads(DASHBOARD.read_text())["panels"])
    exported = _exported()
    for name in CLOSURE_ALERTS:
        used = set(re.findall(r"agentreach_[a-z_]+", rules[name]))
        assert used and used <= exported, (name, used - exported)
        assert used <= set(re.findall(r"agentreach_[a-z_]+", panels)), f"the dashboard does not show {name}"
