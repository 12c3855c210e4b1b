"""CPU seconds per process of a bench step: the children it started (with their own children), the broker JVM.

Each labelled process is read with psutil (user + system, all threads); a process it spawned appears
as `<label>/<pid>` so a router that splits itself into processes shows each. The broker's JVM is the
local process listening on the bootstrap port; a remote broker (or one whose pid cannot be seen)
reads as None, shown as "n/a".
"""

from __future__ import annotations

from collections.abc import Mapping

import psutil

Reading = dict[str, float | None]
"""label -> CPU seconds so far (None: not measurable here)."""

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def read(processes: Mapping[str, int | None]) -> Reading:
    """CPU seconds of each labelled pid and of the processes below it that carry no label of their own."""
    labelled = {pid for pid in processes.values() if pid is not None}
    out: Reading = {}
    for label, pid in processes.items():
        out[label] = None
        if pid is None:
            continue
        try:
            proc = psutil.Process(pid)
            out[label] = _seconds(proc)
            below = proc.children()
        except psutil.Error:
            continue
        while below:
            child = below.pop()
            if child.pid in labelled:
                continue  # read under its own label, with what it spawned
            try:
                out[f"{label}/{child.pid}"] = _seconds(child)
                below.extend(child.children())
            except psutil.Error:
                continue  # exited between listing and reading
    return out


def _seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def spent(before: Reading, after: Reading) -> Reading:
    """CPU seconds each process spent between two readings; a process started in between counts from zero, one
    that is gone or was never measurable is None."""
    out: Reading = {}
    for label in {**before, **after}:
        end = after.get(label)
        start = before.get(label, 0.0)
        out[label] = None if end is None or start is None else max(end - start, 0.0)
    return out


def per_1k(before: Reading, after: Reading, messages: int) -> Reading:
    """CPU seconds per 1,000 messages between two readings (None as in `spent`, and for no messages)."""
    return {label: None if seconds is None or messages <= 0 else round(seconds / messages * 1000, 4)
            for label, seconds in spent(before, after).items()}


def broker_pid(servers: str) -> int | None:
    """The pid listening on the one loopback bootstrap address, None for a remote or unseen broker."""
    port = loopback_port(servers)
    if port is None:
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return None


def loopback_port(servers: str) -> int | None:
    """The port of a single `host:port` bootstrap on this machine's loopback, else None."""
    entries = [s.strip() for s in servers.split(",") if s.strip()]
    if len(entries) != 1 or ":" not in entries[0]:
        return None
    host, _, port = entries[0].rpartition(":")
    host = host.split("://")[-1]
    if host not in LOOPBACK or not port.isdigit():
        return None
    return int(port)
