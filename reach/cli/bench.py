"""`reach bench`: raw Kafka, plain faust, Quix Streams, the router, the round trip, the knee search, Reach beside
plain Kafka and FastStream request-reply (peers), scoring and the ingress gateway."""

from __future__ import annotations

from pathlib import Path

import typer

from reach.cli.common import Exit, console, err_console


def _usage(message: str) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(Exit.USAGE)


def _numbers(option: str, text: str) -> tuple[float, ...]:
    try:
        return tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise _usage(f"{option} takes numbers separated by commas (500,2000); got {text!r}") from None


def bench(
    json_file: Path | None = typer.Option(None, "--json", help="also write the results as JSON to FILE"),
    messages: int = typer.Option(20_000, "--messages", help="measured messages per throughput mode (after warm-up)"),
    rates: str = typer.Option("200,1000", "--rates", help="round trip offered rates, envelopes/s"),
    echo_rates: str = typer.Option("100,300", "--echo-rates",
                                   help="round trip offered rates to two echo agents (empty: skip)"),
    split_router: bool = typer.Option(True, "--split-router/--no-split-router",
                                      help="the no-op rates again with the routing hot path and the status fold "
                                      "in two processes (`reach router --role`)"),
    seconds: float = typer.Option(10.0, "--seconds", help="measured seconds per round-trip rate"),
    modes: str = typer.Option("all", "--modes",
                              help="which modes to run: idle,raw,faust,quix,route,roundtrip,knee,peers,status-scale,"
                              "scoring,gateway,intent,publish,scaleout"),
    batch_size: int = typer.Option(500, "--batch-size", help="the router's consume batch"),
    route_workers: str = typer.Option("1,2", "--route-workers", help="routing worker processes per route burst"),
    knee_low: float = typer.Option(50.0, "--knee-low", help="knee search: a rate known to pass, envelopes/s"),
    knee_high: float = typer.Option(4_000.0, "--knee-high", help="knee search: a rate known to fail"),
    knee_resolution: float = typer.Option(0.1, "--knee-resolution",
                                          help="knee search: stop when the bracket is narrower than this fraction"),
    knee_seconds: float = typer.Option(20.0, "--knee-seconds", help="knee search: measured open-loop seconds per step"),
    knee_warmup: float = typer.Option(3.0, "--knee-warmup", help="knee search: warm-up seconds per step"),
    knee_repeats: int = typer.Option(2, "--knee-repeats", help="knee search: how many times each search runs"),
    knee_setups: str = typer.Option("noop,echo x2", "--knee-setups",
                                    help="knee search: which set-ups (noop, echo x2, noop x2, noop split, "
                                    "noop redis-cluster: on a private 3-master Redis Cluster)"),
    peers: str = typer.Option("plain,faststream", "--peers",
                              help="peers: the request-replies measured beside Reach's no-op knee"),
    peers_high: float = typer.Option(50_000.0, "--peers-high",
                                     help="peers: a rate known to fail for them (their knee search's upper bound)"),
    peers_workers: int = typer.Option(16, "--peers-workers", min=1,
                                      help="peers: FastStream's concurrent handlers (max_workers)"),
    status_messages: int = typer.Option(500_000, "--status-messages",
                                        help="status-scale: messages folded (4 receipts each)"),
    gateway_rates: str = typer.Option("250,500,1000", "--gateway-rates",
                                      help="gateway: offered rates of signed POST /v1/envelopes, requests/s"),
    gateway_seconds: float = typer.Option(6.0, "--gateway-seconds", help="gateway: measured seconds per rate"),
    gateway_generators: int = typer.Option(2, "--gateway-generators", min=1,
                                           help="gateway: load-generator processes sharing each rate"),
    scaleout_rate: float = typer.Option(150.0, "--scaleout-rate",
                                        help="scaleout: the fixed offered rate for 1, 2 and 4 route processes"),
    scaleout_seconds: float = typer.Option(20.0, "--scaleout-seconds", help="scaleout: measured seconds per step"),
    quick: bool = typer.Option(False, "--quick", help="tiny counts: checks the bench works, measures nothing"),
) -> None:
    """Measure every mode in one run against the local broker (or REACH_BOOTSTRAP); print the tables."""
    from reach.settings import ReachSettings
    from reach.tooling.bench.gateway import GatewayConfig
    from reach.tooling.bench.knee import KneeConfig
    from reach.tooling.bench.peers import PEERS, PeersConfig
    from reach.tooling.bench.report import render
    from reach.tooling.bench.round_trip import SETUPS
    from reach.tooling.bench.scaleout import ScaleoutConfig
    from reach.tooling.bench.suite import MODES, BenchConfig, run

    offered = _numbers("--rates", rates)
    gateway = GatewayConfig(rates=_numbers("--gateway-rates", gateway_rates), seconds=gateway_seconds,
                            generators=gateway_generators)
    if not gateway.rates or min(gateway.rates) <= 0 or gateway_seconds <= 0:
        raise _usage("--gateway-rates needs rates > 0 and --gateway-seconds > 0")
    echo = _numbers("--echo-rates", echo_rates)
    workers = tuple(int(w) for w in _numbers("--route-workers", route_workers))
    chosen = MODES if modes.strip() == "all" else tuple(m.strip() for m in modes.split(",") if m.strip())
    setups = tuple(s.strip() for s in knee_setups.split(",") if s.strip())
    compared = tuple(p.strip() for p in peers.split(",") if p.strip())
    unknown = ([m for m in chosen if m not in MODES] + [s for s in setups if s not in SETUPS]
               + [p for p in compared if p not in PEERS])
    if unknown or not offered or messages < 1 or not workers or min(workers) < 1:
        raise _usage(f"unknown mode(s), set-up(s) or peer(s) {unknown} (modes: {', '.join(MODES)}; set-ups: "
                     f"{', '.join(SETUPS)}; peers: {', '.join(PEERS)}), or no rates, or --messages < 1, or a worker "
                     "count < 1")
    if scaleout_rate <= 0 or scaleout_seconds <= 0:
        raise _usage("--scaleout-rate and --scaleout-seconds must be > 0")
    if peers_high <= knee_low:
        raise _usage("--peers-high must be above --knee-low")
    if not 0 < knee_low < knee_high or knee_resolution <= 0 or knee_repeats < 1 or knee_seconds <= 0:
        raise _usage("the knee search needs 0 < --knee-low < --knee-high, --knee-resolution > 0, "
                     "--knee-repeats >= 1 and --knee-seconds > 0")
    topics_file = ReachSettings().topics_file
    if quick:
        config = BenchConfig.quick(modes=chosen, topics_file=topics_file, batch_size=batch_size, route_workers=workers,
                                   knee=KneeConfig.quick(setups=setups), split_router=split_router,
                                   peers=PeersConfig.quick(peers=compared, workers=peers_workers))
    else:
        knee = KneeConfig(low=knee_low, high=knee_high, resolution=knee_resolution, seconds=knee_seconds,
                          warmup=knee_warmup, repeats=knee_repeats, setups=setups)
        config = BenchConfig(messages=messages, warmup=max(messages // 10, 100), rates=offered, echo_rates=echo,
                             rate_seconds=seconds,
                             modes=chosen, topics_file=topics_file, batch_size=batch_size, route_workers=workers,
                             knee=knee, status_messages=status_messages, split_router=split_router,
                             gateway=gateway, peers=PeersConfig(peers=compared, high=peers_high, workers=peers_workers),
                             scaleout=ScaleoutConfig(rate=scaleout_rate, seconds=scaleout_seconds,
                                                     churn_seconds=max(scaleout_seconds * 1.5, 9.0)))
    report = run(config, progress=lambda msg: err_console.print(f"[dim]bench: {msg}[/]"))
    render(report, console)
    if json_file is not None:
        report.write_json(json_file)
        err_console.print(f"[dim]wrote {json_file}[/]")
    if any(r.lost for r in report.results):
        raise typer.Exit(Exit.NOT_COMPLETED)
