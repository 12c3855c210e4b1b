"""The Redis of `reach local up`: one redis-server, or with `--redis-cluster N` a Redis Cluster of N masters, on
loopback under REACH_HOME, each with AOF on (`appendfsync everysec`: a restart loses at most the last second of
leases, results and idempotency keys, not all of them; docs/decisions/0031-redis-cluster-and-bounded-result-cache.md).

A cluster is formed once with CLUSTER ADDSLOTSRANGE and CLUSTER MEET (no redis-cli needed); each node keeps its
view in `nodes.conf` and its data in its AOF, so a later `up` on the same ports brings the same cluster back."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from reach.errors import ConfigError, InfraUnavailable
from reach.tooling.local import process
from reach.tooling.local.tls import TlsSetup, redis_lines

SLOTS = 16384
MAX_MASTERS = 9
START_TIMEOUT_S = 15.0
CLUSTER_FORM_TIMEOUT_S = 30.0


def redis_server() -> str:
    server = shutil.which("redis-server")
    if server is None:
        raise InfraUnavailable(
            "redis-server is missing. Install it (Debian: apt-get install redis-server; `make setup` does), "
            "or export REACH_REDIS_URL."
        )
    return server


def redis_config(*, port: int, data: Path, bus_port: int | None = None, tls: TlsSetup | None = None) -> str:
    """redis.conf of one local node: loopback only, AOF every second, no RDB snapshots (the AOF is the record);
    with a `bus_port`, a cluster node (its cluster bus on that port: the default, port + 10000, may be taken or
    past 65535); with `tls` (`reach local up --tls`), TLS on `port` only and an ACL user instead of the open
    default user."""
    lines = [
        "# Written by `reach local up`; regenerated on every start.",
        *(redis_lines(tls, port) if tls is not None else [f"port {port}"]),
        "bind 127.0.0.1",
        "protected-mode yes",
        f'dir "{data}"',
        'save ""',
        "appendonly yes",
        "appendfsync everysec",
        'appendfilename "appendonly.aof"',
        "aof-use-rdb-preamble yes",
    ]
    if bus_port is not None:
        lines += [
            "cluster-enabled yes",
            f"cluster-port {bus_port}",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout 5000",
            # a local cluster without replicas: a node that is down makes only its own slots fail
            "cluster-require-full-coverage no",
        ]
    return "\n".join(lines) + "\n"


def cluster_url(ports: Sequence[int]) -> str:
    """The URL every user reads (REACH_REDIS_URL): the first node as the seed, redis-py finds the others."""
    return f"redis+cluster://127.0.0.1:{ports[0]}"


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The 16384 slots in `masters` contiguous, near-equal ranges (first, last)."""
    if masters < 1:
        raise ConfigError(f"a Redis Cluster needs at least 1 master, not {masters}")
    bounds = [SLOTS * i // masters for i in range(masters + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(masters)]


def answers(port: int | None, tls: TlsSetup | None = None) -> bool:
    """Whether Redis answers PING on `port` (over TLS, logged in as the ACL user, with `tls`)."""
    if not port:
        return False
    if tls is not None:
        client = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(tls.files.ca),
                             username=tls.username, password=tls.redis_password, socket_timeout=1,
                             socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def listenable(port: int) -> bool:
    """Whether a server may listen on `port` now: nothing else listens there (connections of a node just stopped,
    in TIME_WAIT, do not count: redis-server binds with SO_REUSEADDR as this check does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class RedisNode:
    """One redis-server process `reach local up` owns."""

    port: int
    pid: int | None = None

    @property
    def running(self) -> bool:
        return process.alive(self.pid) and answers(self.port)


def start_node(port: int, data: Path, *, bus_port: int | None = None, tls: TlsSetup | None = None) -> int:
    """Spawn one redis-server on `port` from its generated config, wait until it answers; returns its pid."""
    server = redis_server()
    data.mkdir(parents=True, exist_ok=True)
    conf = data / "redis.conf"
    conf.write_text(redis_config(port=port, data=data, bus_port=bus_port, tls=tls))
    pid = process.spawn([server, str(conf)], data / "redis.log")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not process.alive(pid):  # first: another server answering on the port is not this one
            break
        if answers(port, tls):
            return pid
        time.sleep(0.1)
    process.stop(pid)
    raise InfraUnavailable(f"Redis on port {port} did not start. Last lines of its log:\n"
                           f"{process.tail(data / 'redis.log')}")


def start_cluster(nodes: list[dict[str, Any]], home: Path, masters: int) -> list[dict[str, Any]]:
    """Start the cluster's nodes that are not running (new ports for a node never started), form the cluster if
    its nodes have not met yet, and wait until it serves every slot. Returns the nodes with their pids."""
    if masters < 1 or masters > MAX_MASTERS:
        raise ConfigError(f"--redis-cluster {masters}: expected 1 to {MAX_MASTERS} masters (3 is the usual).")
    if not nodes:
        nodes = [{"port": process.free_port(), "bus_port": process.free_port()} for _ in range(masters)]
    for i, node in enumerate(nodes):
        if RedisNode(node["port"], node.get("pid")).running:
            continue
        node.pop("pid", None)
        taken = [p for p in (node["port"], node["bus_port"]) if not listenable(p)]
        if taken:
            raise InfraUnavailable(f"Port(s) {taken} of Redis Cluster node {i + 1} are taken by another process; "
                                   "stop it, or run `reach local down` and use another REACH_HOME.")
        node["pid"] = start_node(node["port"], home / "redis-cluster" / f"node-{i + 1}", bus_port=node["bus_port"])
    try:
        form(ports=[n["port"] for n in nodes], bus_port=nodes[0]["bus_port"])
    except Exception:
        for node in nodes:  # nothing half started is left behind
            process.stop(node.pop("pid", None))
        raise
    return nodes


def form(ports: Sequence[int], *, bus_port: int, timeout: float = CLUSTER_FORM_TIMEOUT_S) -> None:
    """Give each node its slot range and introduce them (only nodes that hold no slots yet), then wait for
    `cluster_state:ok` on every node (`bus_port`: the first node's cluster bus, which the others meet)."""
    clients = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=5) for p in ports]
    try:
        fresh = [c for c in clients if not _holds_slots(c)]
        if len(fresh) == len(clients):
            for client, (first, last) in zip(clients, slot_ranges(len(clients)), strict=True):
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            for client in clients[1:]:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0], bus_port)
        elif fresh:
            raise InfraUnavailable(f"Redis Cluster nodes on ports {list(ports)} are half formed (some hold slots, "
                                   "some none): run `reach local down` and start again in a fresh REACH_HOME.")
        deadline = time.monotonic() + timeout
        while not all(_ok(c, len(clients)) for c in clients):
            if time.monotonic() > deadline:
                raise InfraUnavailable(f"The Redis Cluster on ports {list(ports)} did not reach cluster_state:ok "
                                       f"within {timeout:.0f}s")
            time.sleep(0.1)
    finally:
        for client in clients:
            client.close()


def _holds_slots(client: redis.Redis) -> bool:
    info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_slots_assigned:0" not in text


def _ok(client: redis.Redis, masters: int) -> bool:
    try:
        info = client.execute_command("CLUSTER", "INFO")
    except (redis.RedisError, OSError):
        return False
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text and f"cluster_known_nodes:{masters}" in text
