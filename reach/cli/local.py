"""`reach local up|down|status`: the embedded broker and Redis."""

from __future__ import annotations

import json

import typer

from reach.cli.common import Exit, console, err_console
from reach.settings import ReachSettings
from reach.tooling.local import LocalInfra, LocalStatus

app = typer.Typer(help="Run a real KRaft Kafka broker (or a --brokers 3 cluster) and Redis on loopback.",
                  no_args_is_help=True)


def _infra() -> LocalInfra:
    return LocalInfra(ReachSettings().home)


def _report(status: LocalStatus, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(status.as_dict()))
        return
    sasl = f"  sasl: {status.sasl.bootstrap} (user {status.sasl.username})" if status.sasl else ""
    if status.tls is not None:
        sasl = f"  tls: SASL_SSL {status.tls.bootstrap} (user {status.tls.username}), rediss, CA {status.tls.files.ca}"
    nodes = f" ({status.brokers} brokers)" if status.brokers > 1 else ""
    redis = f"redis cluster ({status.redis_cluster} masters, {status.redis_url})" if status.redis_cluster else "redis"
    err_console.print(
        f"kafka {status.kafka_version}{nodes}: {'running' if status.kafka_running else 'stopped'}"
        f"  {redis}: {'running' if status.redis_running else 'stopped'}{sasl}"
    )
    if status.running:
        # stdout carries only the export lines, so `eval $(reach local up)` works.
        print(f"export {status.exports().replace(chr(10), chr(10) + 'export ')}")


@app.command()
def up(
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable status."),
    sasl: bool = typer.Option(False, "--sasl", help="Also open a SASL_PLAINTEXT listener with a SCRAM-SHA-256/512 "
                              "user; the exports then name it and its credentials."),
    brokers: int = typer.Option(1, "--brokers", help="Start a KRaft cluster of this many combined broker+"
                                "controller nodes (3: replication factor 3, min.insync.replicas 2). Use its own "
                                "REACH_HOME."),
    redis_cluster: int = typer.Option(0, "--redis-cluster", help="Start a Redis Cluster of this many masters "
                                      "(3: the scale-out shape) instead of the single Redis; REACH_REDIS_URL is then "
                                      "its redis+cluster:// URL. Use its own REACH_HOME."),
    tls: bool = typer.Option(False, "--tls", help="Encrypt and authenticate every hop: a local CA and certificate, "
                             "the broker (each node with --brokers N) on SASL_SSL (SCRAM) only, Redis on TLS with an "
                             "ACL user; the exports name the CA and credentials. Use its own REACH_HOME (it stays "
                             "TLS)."),
) -> None:
    """Start the broker(s) and Redis (idempotent: a second call reports the running ones)."""
    infra = _infra()
    before = infra.status()
    if (before.running and (before.sasl is not None or not sasl) and (before.tls is not None or not tls)
            and before.brokers == brokers and before.redis_cluster == redis_cluster):
        err_console.print("already running")
    _report(infra.up(sasl=sasl, brokers=brokers, redis_cluster=redis_cluster, tls=tls), as_json)


@app.command()
def down() -> None:
    """Stop the processes `reach local up` started, cleanly."""
    stopped = _infra().down()
    err_console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Show what runs; exits 4 when the broker or Redis is not running."""
    current = _infra().status()
    _report(current, as_json)
    if not current.running:
        raise typer.Exit(Exit.UNREACHABLE)
