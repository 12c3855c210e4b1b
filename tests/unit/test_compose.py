"""docker/compose.yaml publishes the plaintext broker and the password-less Redis on loopback only."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"


def test_every_published_port_is_bound_to_loopback() -> None:
    """Issue 28, finding 12: `9092:9092` and `6379:6379` published Kafka and Redis on every interface."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = {name: service.get("ports", []) for name, service in services.items()}
    assert published["kafka"] and published["redis"]
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_prometheus_and_grafana_listen_on_loopback_and_load_the_dashboard() -> None:
    """Issue 38 item 4: both on the host's network (they scrape processes on this host), bound to 127.0.0.1,
    every file they mount present; Grafana's datasource is that Prometheus, and its provider reads the folder the
    dashboard is mounted in."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert prometheus["network_mode"] == grafana["network_mode"] == "host"
    assert "--web.listen-address=127.0.0.1:9090" in prometheus["command"]
    assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    for volume in prometheus["volumes"] + grafana["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("./"):
            assert (COMPOSE.parent / source).exists(), volume
    provisioning = COMPOSE.parent / "grafana" / "provisioning"
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert (source["type"], source["url"]) == ("prometheus", "http://127.0.0.1:9090")
    [provider] = yaml.safe_load((provisioning / "dashboards" / "agentreach.yaml").read_text())["providers"]
    mounted = [v.split(":")[1] for v in grafana["volumes"] if v.startswith("./grafana/agentreach-dashboard.json")]
    assert [str(Path(m).parent) for m in mounted] == [provider["options"]["path"]]


def test_the_prometheus_config_scrapes_router_gateway_and_agents() -> None:
    config = yaml.safe_load((COMPOSE.parent / "prometheus" / "prometheus.yml").read_text())
    assert {job["job_name"] for job in config["scrape_configs"]} == {
        "agentreach-router", "agentreach-gateway", "agentreach-agents"}
    targets = [t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]]
    assert all(t.startswith("127.0.0.1:") for t in targets), targets
