"""`make chart-test`: render charts/agent-reach with its default values and with every option on, and check what a
cluster and an operator would see, with no network: each manifest valid against Kubernetes' own schemas (the
kubernetes-validate package ships them), every container non-root on a read-only root, every command one the
`reach` CLI accepts, every REACH_* variable one the settings document, /healthz probes exactly where a process
serves HTTP, and a values file the chart's schema refuses. Exit 1 with the failures listed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agent-reach"
HELM = os.environ.get("HELM", str(Path.home() / ".cache" / "agent-reach" / "bin" / "helm"))
K8S_VERSIONS = ("1.30.0", "1.37.0")
HTTP_COMPONENTS = {"router-route", "router-status", "gateway"}  # they serve /healthz (gateway, stream app views)
CUSTOM_KINDS = {"ScaledObject"}  # KEDA's CRD: checked by hand below, its schema is not Kubernetes'

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    # a helm built by `go install` assumes Kubernetes 1.20 (its release builds stamp the version): name one
    return subprocess.run([HELM, *args, "--kube-version", K8S_VERSIONS[0]], capture_output=True, text=True,
                          check=False)


def render(values: Path | None) -> list[dict[str, Any]]:
    extra = ["-f", str(values)] if values else []
    lint = helm("lint", "--strict", str(CHART), *extra)
    if lint.returncode != 0:
        fail(f"helm lint {values}: {lint.stdout}{lint.stderr}")
    out = helm("template", "reach", str(CHART), *extra)
    if out.returncode != 0:
        fail(f"helm template {values}: {out.stderr}")
        return []
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def documented_settings() -> set[str]:
    sources = ("docs/operations.md", "reach/settings.py", "reach/gateway/settings.py")
    text = "".join((ROOT / source).read_text() for source in sources)
    return set(re.findall(r"REACH_[A-Z0-9_]+", text))


def cli_accepts(args: list[str]) -> bool:
    from reach.cli import app

    result = CliRunner().invoke(app, [*args, "--help"])
    return result.exit_code == 0


def check(docs: list[dict[str, Any]], label: str) -> None:
    known = documented_settings()
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        where = f"{label}: {kind}/{name}"
        if kind in CUSTOM_KINDS:
            trigger = doc["spec"]["triggers"][0]
            if trigger["type"] != "kafka" or not trigger["metadata"]["consumerGroup"].endswith(".router.capabilities"):
                fail(f"{where}: scales on {trigger}, not the route workers' consumer lag")
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                fail(f"{where} (k8s {version}): {exc.message} at {list(exc.path)}")
        if kind not in ("Deployment", "Job"):
            continue
        component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = doc["spec"]["template"]["spec"]
        if not pod["securityContext"].get("runAsNonRoot"):
            fail(f"{where}: the pod may run as root")
        for container in pod["containers"]:
            sc = container["securityContext"]
            if not sc.get("readOnlyRootFilesystem") or sc.get("allowPrivilegeEscalation") is not False:
                fail(f"{where}: not read-only or may escalate: {sc}")
            if not cli_accepts(container["args"]):
                fail(f"{where}: `reach {' '.join(container['args'])}` is not a command the CLI accepts")
            names = [e["name"] for e in container["env"]]
            if len(names) != len(set(names)):
                fail(f"{where}: a variable is set twice: {names}")
            unknown = {n for n in names if n.startswith("REACH_")} - known
            if unknown:
                fail(f"{where}: sets {sorted(unknown)}, which no setting reads (docs, settings modules)")
            probed = "livenessProbe" in container and "readinessProbe" in container
            serves = component in HTTP_COMPONENTS
            if probed != serves:
                fail(f"{where}: probes {probed}, but serves HTTP {serves}")
            if probed and container["livenessProbe"]["httpGet"]["path"] != "/healthz":
                fail(f"{where}: liveness is not /healthz")
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            if "/var/lib/reach" not in mounts:
                fail(f"{where}: REACH_HOME is not on a writable volume")


def main() -> int:
    default = render(None)
    check(default, "default values")
    kinds = sorted({(d["kind"], d["metadata"]["name"]) for d in default})
    full = render(ROOT / "tests" / "chart" / "values-full.yaml")
    check(full, "values-full.yaml")
    full_kinds = {d["kind"] for d in full}
    for needed in ("ScaledObject", "PodDisruptionBudget", "Service", "Deployment"):
        if needed not in full_kinds:
            fail(f"values-full.yaml renders no {needed}")
    # The chart's schema refuses a wrong value before anything renders.
    bad = helm("template", "reach", str(CHART), "--set", "kafka.securityProtocol=SASL_TLS")
    if bad.returncode == 0 or "securityProtocol" not in bad.stderr:
        fail(f"values.schema.json accepted kafka.securityProtocol=SASL_TLS: {bad.stderr}")
    # SASL without its Secret is refused with the value to set.
    nosecret = helm("template", "reach", str(CHART), "--set", "kafka.securityProtocol=SASL_SSL",
                    "--set", "kafka.sasl.mechanism=PLAIN")
    if nosecret.returncode == 0 or "kafka.sasl.existingSecret" not in nosecret.stderr:
        fail(f"SASL without kafka.sasl.existingSecret rendered: {nosecret.stderr}")
    print(f"default values: {len(default)} manifests ({', '.join(f'{k}/{n}' for k, n in kinds)})")
    print(f"values-full.yaml: {len(full)} manifests; validated against Kubernetes {', '.join(K8S_VERSIONS)}")
    for message in failures:
        print(f"FAIL {message}", file=sys.stderr)
    print(f"chart checks: {'failed' if failures else 'passed'} ({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
