"""A network partition of one local process: nothing it sends leaves it, nothing sent to its ports reaches it.

Every node of the local cluster listens on 127.0.0.1, so addresses cannot tell them apart, and a broker's own
connections to its peers leave from ephemeral ports: dropping its listening ports alone would still let it
fetch from the new leaders and follow the controller quorum. So the process is moved into a cgroup (v2) of its
own, then iptables OUTPUT rules (in a chain of our own, so cleaning up removes exactly them) drop every packet
a socket made from then on by that process sends (the `cgroup` match; a socket keeps the cgroup it was made
in), and every packet from or to a local port of a socket it already had (its listener and controller ports,
its connections to peers: read from /proc). Healing removes the chain and moves the process back. Needs root,
iptables with the `cgroup` and `multiport` matches and a writable cgroup v2 hierarchy; `unavailable()` says
what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from reach.errors import InfraUnavailable

CGROUP_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))  # hybrid hierarchy first, then pure v2


def cgroup_root() -> Path | None:
    """The cgroup v2 mount this process may create groups in."""
    for root in CGROUP_ROOTS:
        if (root / "cgroup.procs").exists() and (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
            return root
    return None


def unavailable() -> str | None:
    """Why a partition cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "a partition needs root (iptables, cgroups)"
    if shutil.which("iptables") is None:
        return "a partition needs iptables (apt-get install iptables)"
    if cgroup_root() is None:
        return "a partition needs a writable cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified)"
    return None


MULTIPORT_MAX = 15  # ports one `-m multiport` rule takes


def rules(chain: str, cgroup: str, ports: list[int]) -> list[list[str]]:
    """The iptables commands that cut the process off: the chain, its drops, and the jump from OUTPUT."""
    commands = [["-N", chain], ["-A", chain, "-m", "cgroup", "--path", cgroup, "-j", "DROP"]]
    ordered = sorted(set(ports))
    for i in range(0, len(ordered), MULTIPORT_MAX):
        chunk = ",".join(map(str, ordered[i:i + MULTIPORT_MAX]))
        commands.append(["-A", chain, "-p", "tcp", "-m", "multiport", "--ports", chunk, "-j", "DROP"])
    commands.append(["-I", "OUTPUT", "1", "-j", chain])
    return commands


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds open."""
    found = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir() if fds.exists() else ():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def local_ports(table: str, inodes: set[int]) -> set[int]:
    """Local TCP ports of the sockets in `inodes`, from the text of /proc/net/tcp (or tcp6)."""
    ports = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and int(fields[9]) in inodes:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def cleanup(chain: str) -> list[list[str]]:
    """The iptables commands that undo `rules` (each may fail harmlessly when that part was never made)."""
    return [["-D", "OUTPUT", "-j", chain], ["-F", chain], ["-X", chain]]


class Partition:
    """`with Partition(pid, ports, name=...):` the process is cut off inside the block, healed after it, even
    when the block raises."""

    def __init__(self, pid: int, *, name: str) -> None:
        reason = unavailable()
        if reason is not None:
            raise InfraUnavailable(f"cannot partition process {pid}: {reason}.")
        root = cgroup_root()
        assert root is not None
        self.pid = pid
        self.ports: set[int] = set()
        self.cgroup = name
        self.chain = f"RF-{name}"[:28]  # iptables chain names are at most 28 characters
        self._root = root
        self._group = root / name

    def __enter__(self) -> Partition:
        try:
            self._group.mkdir(exist_ok=True)
            (self._group / "cgroup.procs").write_text(str(self.pid))
            # after the move: a socket made since is the cgroup rule's, one made before is in this list
            inodes = socket_inodes(self.pid)
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                if Path(table).exists():
                    self.ports |= local_ports(Path(table).read_text(), inodes)
            for args in rules(self.chain, self.cgroup, sorted(self.ports)):
                _iptables(args, check=True)
        except BaseException:
            self.heal()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.heal()

    def heal(self) -> None:
        for args in cleanup(self.chain):
            _iptables(args, check=False)
        try:
            (self._root / "cgroup.procs").write_text(str(self.pid))
        except OSError:
            pass  # it exited meanwhile
        try:
            self._group.rmdir()
        except OSError:
            pass  # never made, or already gone


def _iptables(args: list[str], *, check: bool) -> None:
    done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise InfraUnavailable(f"iptables {' '.join(args)} failed: {done.stderr.strip() or done.returncode}")
