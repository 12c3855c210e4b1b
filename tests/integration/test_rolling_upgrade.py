"""Rolling upgrade from the previous release, with traffic flowing while processes are replaced one at a time.

The previous release is PREVIOUS_RELEASE, the commit issue 28 started from (the parent of 0b804ea, the issue's first
commit): `git archive` of it in this test's tmp dir, in its own virtual environment, installed the way `make setup`
installs the package (a path entry to its source tree, as `pip install -e` does: its codec reads schemas/avro
beside the package) with today's dependencies. Every process is a subprocess in a directory of its own
(reach.tooling.bench.subprocesses.Child): `python -m reach router` and `python -m reach agent run <the fault suite's
ledger agent>` of either release, and a client process of either release that sends `faults.echo` requests
through its own `reach.client.Client` at 20/s.

The order is the one docs/records.md prescribes (readers first): the previous release runs whole (router and
status fold, two agents, its client); today's router replaces it, then each agent, then the client; at the end the
previous release's router comes back in front of today's agents and client (a rollback). Every process of today's
release runs with REACH_RECORDS_WRITE_AS naming the previous release, as docs/operations.md "Rolling upgrades"
tells an operator to (reach.kafka.writeas, docs/decisions/0048): it writes each record with the newest schema the
previous release reads, so the rolled-back router reads today's envelopes, registrations and receipts. Each
replacement happens while the traffic flows. The fault suite's checker then holds every acknowledged message to one
terminal receipt: 0 lost, no message with two different terminals.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reach.envelopes import now_ms
from reach.kafka import codec, writeas
from reach.kafka.codec import HEADER_SIZE, SCHEMA_ROOT, fingerprint
from reach.names import Names
from reach.records import Receipt
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.bench.subprocesses import Child
from reach.tooling.faults import ledger_agent
from reach.tooling.faults.checker import TERMINAL, Seen, Sent, Window, check, parse_ledger
from reach.tooling.faults.rig import healthy
from reach.tooling.local.process import free_port
from tests.integration.agent_support import ROOT, wait_for
from tests.integration.router_helpers import Tail

pytestmark = pytest.mark.integration

PREVIOUS_RELEASE = "d08872c4305bc8f22c9eee4f58ce92d255f98583"
"""The commit before issue 28's first (0b804ea): the release the issue's changes upgrade from."""
TODAY_AGENT = "reach.tooling.faults.ledger_agent:agent"
PREVIOUS_AGENT = "reach.faults.ledger_agent:agent"  # the same agent, where that release kept it
RATE = 20.0
WRITE_AS = PREVIOUS_RELEASE[:7]
"""REACH_RECORDS_WRITE_AS of today's processes: the release the operator may roll back to."""

SENDER = """
import sys, time
from pathlib import Path
from reach.client import Client
stop, rate, n = Path(sys.argv[1]), float(sys.argv[2]), 0
with Client() as client:
    start = time.monotonic()
    while not stop.exists():
        message_id = client.send("faults.echo", {"n": n})  # returns once the broker has it
        print(message_id, int(time.time() * 1000), flush=True)
        n += 1
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
"""


def previous_release(where: Path) -> str:
    """Build PREVIOUS_RELEASE into its own venv under `where`; its interpreter's path."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE], capture_output=True)
    if archive.returncode != 0:
        message = (f"the previous release {PREVIOUS_RELEASE[:7]} is not in this clone's history "
                   f"({archive.stderr.decode(errors='replace').strip()}); clone with full history")
        if os.environ.get("REACH_CI"):
            pytest.fail(message)
        pytest.skip(message)
    src = where / "src"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(src, filter="data")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the release's source tree first (an editable install), then today's dependencies
    (Path(site) / "reach_previous_release.pth").write_text(f"{src}\n{sysconfig.get_paths()['purelib']}\n")
    return str(python)


class Fleet:
    """The processes of one rolling upgrade (each a bench Child in a working directory of its own, so the previous
    release never imports today's code from the current directory) and what each release needs to run."""

    def __init__(self, tmp: Path, previous_python: str) -> None:
        self.tmp, self.previous = tmp, previous_python
        self.port = free_port()  # the router's web port, kept across releases: agents ask its status view
        self.ledger = tmp / "ledger.txt"
        self.ledger.touch()
        self.procs: list[Child] = []

    def env(self, *, today: bool) -> dict[str, str]:
        # today's processes import this checkout; the previous release's its own source tree (its venv's path entry)
        # and the previous release reads its own topics file: it refuses keys added since (e.g. families.agent.sizes),
        # as an operator keeps the old file until every process runs the new release (operations.md)
        own = {} if today else {"REACH_TOPICS_FILE": str(Path(self.previous).parents[2] / "src" / "topics.yaml")}
        return {"PYTHONPATH": str(ROOT) if today else "", "REACH_WEB_PORT": str(self.port),
                "REACH_HOME": str(self.tmp / "home"), "PYTHONFAULTHANDLER": "1",
                ledger_agent.LEDGER_ENV: str(self.ledger), **({writeas.ENV: WRITE_AS} if today else {}), **own}

    def start(self, name: str, args: list[str], *, today: bool, module: bool = True) -> Child:
        label = f"{name} {'today' if today else 'previous'}"
        child = Child(label, args, self.env(today=today), python=sys.executable if today else self.previous,
                      module=module)
        self.procs.append(child)
        return child

    def router(self, *, today: bool) -> Child:
        child = self.start("router", ["reach", "router", "--interval", "2"], today=today)
        child.wait_until(lambda: healthy(self.port), 120, "the router's /healthz")
        return child

    def agent(self, *, today: bool) -> Child:
        return self.start("agent", ["reach", "agent", "run", TODAY_AGENT if today else PREVIOUS_AGENT], today=today)

    def sender(self, *, today: bool) -> tuple[Child, Path]:
        stop = self.tmp / f"stop-{'today' if today else 'previous'}"
        return self.start("client", ["-c", SENDER, str(stop), str(RATE)], today=today, module=False), stop

    def close(self) -> None:
        for child in self.procs:
            child.stop()


def _sent(child: Child) -> list[Sent]:
    """The ids a sender printed (`<message_id> <epoch ms>` a line, beside whatever else its log holds)."""
    out = []
    for line in child.log_path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out.append(Sent(parts[0], int(parts[1]), True))
    return out


def _read_by_previous() -> set[bytes]:
    """The Receipt fingerprints the previous release decodes: every released version up to the one it lists."""
    newest = writeas.releases()[PREVIOUS_RELEASE]["records"]["Receipt"]
    return {fingerprint(json.loads((SCHEMA_ROOT / "history" / "Receipt" / f"{v}.avsc").read_text()))
            for v in range(1, newest + 1)}


def _per_phase(sent: list[Sent], seen: list[Seen], phases: list[tuple[int, str]]) -> dict[str, dict[str, int]]:
    """Terminal outcomes by the phase each message was sent in (the first terminal receipt of each)."""
    first: dict[str, Seen] = {}
    for r in sorted(seen, key=lambda r: r.at_ms):
        if r.status in TERMINAL:
            first.setdefault(r.message_id, r)
    out: dict[str, dict[str, int]] = {}
    for s in sent:
        phase = next((name for at, name in reversed(phases) if at <= s.sent_ms), "before")
        outcome = first[s.message_id].status if s.message_id in first else "none"
        out.setdefault(phase, {}).setdefault(outcome, 0)
        out[phase][outcome] += 1
    return out


@pytest.fixture
def fleet(namespace: str, tmp_path: Path) -> Iterator[Fleet]:
    built = previous_release(tmp_path / "previous")
    fleet = Fleet(tmp_path, built)
    yield fleet
    fleet.close()


PREVIOUS_WHOLE, ROUTER_UP, TODAY_ROUTER = "previous release whole", "router upgrade", "today's router"
AGENT_SWAPS, CLIENT_SWAP = ("agent 1 upgrade", "agent 2 upgrade"), "client upgrade"
ROUTER_DOWN, PREVIOUS_ROUTER = "router rollback", "previous router, today's agents and client"


@pytest.mark.timeout(300)
def test_a_rolling_upgrade_under_traffic_loses_nothing_and_ends_each_message_once(namespace: str,
                                                                                  fleet: Fleet) -> None:
    names, kafka = Names(namespace), KafkaSettings()
    written: set[bytes] = set()  # the writer schemas of every receipt on the topic

    def receipt(raw: bytes) -> Receipt:
        written.add(bytes(raw[2:HEADER_SIZE]))
        return codec.decode(raw, Receipt)

    tail = Tail(names.receipts, receipt)
    phases: list[tuple[int, str]] = []

    def live_agents(n: int) -> bool:
        return len([r for r in read_registry(kafka, names).live(now_ms()) if r.assigned_partitions]) >= n

    def phase(name: str, seconds: float = 0.0) -> None:
        phases.append((now_ms(), name))
        time.sleep(seconds)  # the experiment's phase length: traffic flows across each replacement

    try:
        start_ms = now_ms()
        router = fleet.router(today=False)
        agents = [fleet.agent(today=False), fleet.agent(today=False)]
        wait_for(lambda: live_agents(2), 90, "two agents of the previous release owning inbox partitions")
        client, stop_previous = fleet.sender(today=False)
        # the first phase's clock starts with the client's first request (a loaded machine starts it late)
        wait_for(lambda: len(_sent(client)) > 0, 60, "the previous release's client sending")
        phase(PREVIOUS_WHOLE, 4)
        phase(ROUTER_UP)  # today's router and status fold replace the previous release's
        router.stop()
        router = fleet.router(today=True)
        phase(TODAY_ROUTER, 4)
        for i, name in enumerate(AGENT_SWAPS):  # then today's agents, one at a time
            phase(name)
            agents[i].stop()
            agents[i] = fleet.agent(today=True)
            time.sleep(6)
        phase(CLIENT_SWAP, 4)  # today's client replaces the previous release's
        today_client, stop_today = fleet.sender(today=True)
        wait_for(lambda: len(_sent(today_client)) > 0, 60, "today's client sending")
        stop_previous.touch()
        time.sleep(4)
        phase(ROUTER_DOWN)  # the previous release's router back in front of today's agents and client
        router.stop()
        router = fleet.router(today=False)
        phase(PREVIOUS_ROUTER, 6)
        stop_today.touch()
        for proc in (client, today_client):
            proc.proc.wait(30)
        end_ms = now_ms()

        sent = _sent(client) + _sent(today_client)
        wanted = {s.message_id for s in sent}
        assert len(_sent(client)) > 0 and len(_sent(today_client)) > 0, (client.tail(), today_client.tail())

        def ended() -> bool:
            return wanted <= {r.message_id for r in tail.poll() if str(r.status) in TERMINAL}

        try:
            wait_for(ended, 90, "a terminal receipt for every message sent")
        except AssertionError:
            pass  # the checker below says which
        seen = [Seen(r.message_id, r.generation, str(r.status), r.at, r.error.code if r.error else "")
                for r in tail.records]
        figures = check(sent, seen, parse_ledger(fleet.ledger.read_text().splitlines()), Window(start_ms, end_ms))
        by_phase = _per_phase(sent, seen, phases)
        print(f"rolling upgrade: {figures.as_dict()}\nper phase: {by_phase}")  # the figures docs/reliability.md cites
        evidence = f"{figures.as_dict()}\nper phase: {by_phase}\n" + "\n".join(
            f"--- {p.name}\n{p.tail()}" for p in fleet.procs if "router" in p.name)
        # the criterion, across every phase: nothing lost, one terminal outcome per message
        assert figures.sent == len(wanted) and figures.lost == 0, evidence
        assert figures.double_terminal == 0, evidence
        # the previous release's agents and client against today's router and status fold: every request completes
        for name in (PREVIOUS_WHOLE, ROUTER_UP, TODAY_ROUTER):
            assert set(by_phase[name]) == {"COMPLETED"}, evidence
        # agents replaced one at a time, then the client, then the router rolled back: served throughout (a replaced
        # instance may leave a second with nowhere to route in a mixed fleet: UNROUTABLE, once, never lost)
        for name in (*AGENT_SWAPS, CLIENT_SWAP, ROUTER_DOWN, PREVIOUS_ROUTER):
            assert set(by_phase[name]) <= {"COMPLETED", "UNROUTABLE"}, evidence
        # the rolled-back router reads today's envelopes and registrations (written as the previous release reads
        # them): it routes today's requests to today's agents, it does not reject them (UNKNOWN_SCHEMA) nor find no
        # instance for every one of them (NO_ROUTE) as it did before REACH_RECORDS_WRITE_AS
        assert by_phase[PREVIOUS_ROUTER].get("COMPLETED", 0) > by_phase[PREVIOUS_ROUTER].get("UNROUTABLE", 0), evidence
        # every receipt on the topic, whoever wrote it, is one the previous release's status fold reads
        assert written <= _read_by_previous(), [fp.hex() for fp in written - _read_by_previous()]
    finally:
        tail.close()
