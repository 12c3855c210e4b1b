"""The partition's rules: the process's own sockets (by cgroup and by their local ports) are cut, and cleaning
up removes exactly the chain it made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reach.tooling.faults import netsplit
from reach.tooling.faults.scenarios import BY_NAME

# /proc/net/tcp as the kernel writes it: a listener on 127.0.0.1:9092 (inode 111), a connection from :54321 to a
# peer's :9093 (inode 222), and someone else's socket (inode 333)
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:D431 0100007F:2385 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
"""


def test_the_local_ports_of_its_own_sockets_only() -> None:
    assert netsplit.local_ports(TCP, {111, 222}) == {9092, 54321}


def test_the_rules_drop_its_cgroup_and_its_ports_in_a_chain_of_their_own() -> None:
    ports = list(range(10_000, 10_020))
    commands = netsplit.rules("RF-x", "reach-faults-x", ports)
    assert commands[0] == ["-N", "RF-x"]
    assert ["-A", "RF-x", "-m", "cgroup", "--path", "reach-faults-x", "-j", "DROP"] in commands
    multiport = [c[c.index("--ports") + 1] for c in commands if "--ports" in c]
    assert [len(m.split(",")) for m in multiport] == [15, 5], "multiport takes at most 15 ports a rule"
    assert commands[-1] == ["-I", "OUTPUT", "1", "-j", "RF-x"]
    assert netsplit.cleanup("RF-x") == [["-D", "OUTPUT", "-j", "RF-x"], ["-F", "RF-x"], ["-X", "RF-x"]]


def test_this_process_s_sockets_are_found_by_inode() -> None:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        table = Path("/proc/net/tcp").read_text()
        assert port in netsplit.local_ports(table, netsplit.socket_inodes(os.getpid()))


def test_the_partition_scenario_says_why_it_cannot_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netsplit.shutil, "which", lambda _name: None)
    monkeypatch.setattr(netsplit.os, "geteuid", lambda: 0)
    assert "iptables" in (BY_NAME["partition"].unavailable() or "")
    monkeypatch.setattr(netsplit.os, "geteuid", lambda: 1000)
    assert "root" in (BY_NAME["partition"].unavailable() or "")
    with pytest.raises(netsplit.InfraUnavailable, match="needs root"):
        netsplit.Partition(1, name="x")
