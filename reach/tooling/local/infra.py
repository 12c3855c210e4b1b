"""`reach local up|down|status`: a real single-node KRaft broker (Maven jars, Java 17) and Redis (one node, or a
Redis Cluster with `--redis-cluster N`: reach/tooling/local/redisnodes.py)."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from reach.errors import ConfigError, InfraUnavailable
from reach.settings import KafkaSettings
from reach.tooling.local import certs, process, redisnodes
from reach.tooling.local.tls import TlsSetup, broker_listeners

KAFKA_VERSION = "4.1.1"
_HERE = Path(__file__).resolve().parent
SASL_USER = "reach"
SASL_MECHANISM = "SCRAM-SHA-512"  # what the exports name; the user has SCRAM-SHA-256 credentials as well
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_ITERATIONS = 8192
MAX_BROKERS = 5
CLUSTER_HEAP = "384m"  # per node of a `--brokers N` cluster: N JVMs share a small machine
# The full JIT (C2), for the single broker and every node of a cluster: C1 only (-XX:TieredStopAtLevel=1) starts
# faster but cost 25-33% more broker CPU per request once warm; the broker's cost is per request, so that is most
# of its share of the box. The fault suite met its recovery targets on a C2 cluster (decision 0025, addendum).
JIT_FLAGS: list[str] = []
# The heap is committed and touched at start (-Xms = -Xmx, AlwaysPreTouch), as Kafka's own docs advise for a
# broker: with -Xms256m the 60-minute soak saw G1 grow the committed heap once, after 36 minutes, a +170 MiB step
# in the broker's RSS that reads as growth; touched up front, the RSS is flat from the start (docs/reliability.md).
HEAP_FLAGS = ["-Xms512m", "-Xmx512m", "-XX:+AlwaysPreTouch"]


def _pom_hash() -> str:
    return hashlib.sha256((_HERE / "pom.xml").read_bytes()).hexdigest()[:12]


def kafka_libs_dir() -> Path:
    """Where the broker's jars are cached (shared by every REACH_HOME on the machine): one directory per
    Kafka version and pom.xml, so a changed classpath never touches the jars a running broker uses."""
    override = os.environ.get("REACH_KAFKA_LIBS")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "agent-reach" / f"kafka-{KAFKA_VERSION}-{_pom_hash()}"


def ensure_jars() -> Path:
    """Fetch the broker classpath with Maven once; later calls are a file check.

    Maven copies into a fresh directory next to the cache, renamed into place when complete, under a lock:
    two fetches at once do not mix, and a failed one leaves nothing half-filled. REACH_KAFKA_LIBS names a
    directory Maven fills in place (nothing in it is removed)."""
    libs = kafka_libs_dir()
    if (libs / ".complete").exists():
        return libs
    if shutil.which("mvn") is None:
        raise InfraUnavailable(
            "Maven is missing: it fetches the Apache Kafka jars. Install it (Debian: apt-get install maven), "
            "or run Kafka with Docker from docker/ and export REACH_BOOTSTRAP."
        )
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / f".{libs.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (libs / ".complete").exists():  # another process fetched it while this one waited
            return libs
        if os.environ.get("REACH_KAFKA_LIBS"):
            _fetch_jars(libs)
            return libs
        fresh = Path(tempfile.mkdtemp(prefix=f".{libs.name}.", dir=libs.parent))
        try:
            _fetch_jars(fresh)
            if libs.exists():  # an earlier fetch that failed before its marker: nothing ever ran from it
                shutil.rmtree(libs)
            os.replace(fresh, libs)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return libs


def _fetch_jars(into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    cmd = [
        "mvn", "-q", "-B", "-f", str(_HERE / "pom.xml"),
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={into}", f"-Dkafka.version={KAFKA_VERSION}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise InfraUnavailable(f"Maven could not fetch the Kafka jars:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (into / ".complete").write_text(f"{KAFKA_VERSION} {_pom_hash()}")


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise InfraUnavailable(
            "Java 17 is missing: the embedded Kafka broker runs on it. Install it "
            "(Debian: apt-get install openjdk-17-jre-headless), or use docker/ and export REACH_BOOTSTRAP."
        )
    return java


_redis_server = redisnodes.redis_server


@dataclass(frozen=True)
class SaslListener:
    """The broker's extra SASL_PLAINTEXT listener (`reach local up --sasl`) and its SCRAM user."""

    bootstrap: str
    username: str
    password: str
    mechanism: str = SASL_MECHANISM

    def exports(self) -> dict[str, str]:
        return {"REACH_BOOTSTRAP": self.bootstrap, "REACH_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "REACH_SASL_MECHANISM": self.mechanism, "REACH_SASL_USERNAME": self.username,
                "REACH_SASL_PASSWORD": self.password}


@dataclass(frozen=True)
class ClusterNode:
    """One combined broker+controller of a `reach local up --brokers N` cluster."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class LocalStatus:
    """What is running under one REACH_HOME."""

    bootstrap: str | None
    redis_url: str | None
    kafka_running: bool
    redis_running: bool
    kafka_version: str = KAFKA_VERSION
    sasl: SaslListener | None = None
    brokers: int = 1
    redis_cluster: int = 0
    """Masters of the local Redis Cluster (`--redis-cluster N`); 0 for the single Redis."""
    tls: TlsSetup | None = None
    """`--tls`: the SASL_SSL broker and TLS Redis, their CA and credentials (reach/tooling/local/tls.py)."""

    @property
    def running(self) -> bool:
        return self.kafka_running and self.redis_running

    def exports(self) -> str:
        """`NAME=value` lines; with a SASL listener its address and credentials replace the plaintext one; with
        `--tls` the SASL_SSL listener, its SCRAM user, the CA and the rediss:// URL."""
        env = {"REACH_BOOTSTRAP": str(self.bootstrap), "REACH_REDIS_URL": str(self.redis_url)}
        if self.sasl is not None:
            env.update(self.sasl.exports())
        if self.tls is not None:
            env.update(self.tls.exports())
        return "\n".join(f"{name}={value}" for name, value in env.items())

    def as_dict(self) -> dict[str, Any]:
        """For `--json`: the passwords are left out (the export lines carry them)."""
        sasl = None if self.sasl is None else {"bootstrap": self.sasl.bootstrap, "username": self.sasl.username,
                                               "mechanism": self.sasl.mechanism}
        redis_url = self.tls.redis_url_shown if self.tls is not None else self.redis_url
        return {"bootstrap": self.bootstrap, "redis_url": redis_url, "kafka_running": self.kafka_running,
                "redis_running": self.redis_running, "kafka_version": self.kafka_version, "sasl": sasl,
                "tls": None if self.tls is None else self.tls.as_dict(),
                "brokers": self.brokers, "redis_cluster": self.redis_cluster, "running": self.running}


class LocalInfra:
    """The broker and Redis processes owned by one REACH_HOME (pids and ports in local.json)."""

    def __init__(self, home: Path) -> None:
        self.home = home.resolve()
        self.state_file = self.home / "local.json"

    # -- state -----------------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict[str, Any]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.touch(mode=0o600)  # it may hold the local SCRAM password
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def status(self) -> LocalStatus:
        st = self._state()
        tls = self._tls(st)
        pids = [n.get("pid") for n in st.get("nodes", [])] or [st.get("kafka_pid")]
        kafka_running = all(process.alive(pid) for pid in pids) and _broker_answers(st.get("bootstrap"), 2.0, tls=tls)
        return LocalStatus(
            bootstrap=st.get("bootstrap"),
            redis_url=st.get("redis_url"),
            kafka_running=kafka_running,
            redis_running=self._redis_running(st),
            sasl=_sasl_listener(st) if kafka_running else None,
            brokers=len(st.get("nodes", [])) or 1,
            redis_cluster=len(st.get("redis_nodes", [])),
            tls=tls,
        )

    def _tls(self, st: dict[str, Any]) -> TlsSetup | None:
        """The `--tls` set-up of this home (None when it was started without)."""
        if not st.get("tls"):
            return None
        return TlsSetup(bootstrap=str(st.get("bootstrap") or ""), redis_port=int(st.get("redis_port") or 0),
                        files=certs.files_in(self.home / "tls"), kafka_password=str(st["sasl_password"]),
                        redis_password=str(st["redis_password"]))

    def _redis_running(self, st: dict[str, Any]) -> bool:
        if st.get("redis_nodes"):
            return all(redisnodes.RedisNode(n["port"], n.get("pid")).running for n in st["redis_nodes"])
        return process.alive(st.get("redis_pid")) and _redis_answers(st.get("redis_port"), self._tls(st))

    def nodes(self) -> list[ClusterNode]:
        """The nodes of a `--brokers N` cluster (empty for the single broker)."""
        return [ClusterNode(**n) for n in self._state().get("nodes", [])]

    # -- up / down -------------------------------------------------------------------------------------
    def up(self, timeout: float = 90.0, *, sasl: bool = False, brokers: int = 1, redis_cluster: int = 0,
           tls: bool = False) -> LocalStatus:
        """Start what is not running; a second call only reports.

        `sasl` adds a SASL_PLAINTEXT listener with a SCRAM user (a broker running without one is restarted
        with it); the PLAINTEXT listener stays, so the default path is unchanged. `brokers` > 1 starts a
        KRaft cluster of that many combined broker+controller nodes instead of the single broker. `redis_cluster`
        > 0 starts a Redis Cluster of that many masters instead of the single Redis (its URL is the
        `redis+cluster://` one the exports name). `tls` starts the broker (or each node of `brokers` > 1, the
        nodes replicating over SASL_SSL) with a SASL_SSL listener only and Redis with TLS and an ACL user, from a
        local CA (reach/tooling/local/tls.py); a home started so stays so."""
        if brokers < 1 or brokers > MAX_BROKERS:
            raise ConfigError(f"--brokers {brokers}: expected 1 to {MAX_BROKERS} (3 is the replicated cluster).")
        if sasl and brokers > 1:
            raise ConfigError("--sasl runs on the single broker only: drop --brokers, or drop --sasl.")
        st = self._state()
        had = len(st.get("nodes", [])) or (1 if st.get("kafka_pid") or st.get("kafka_port") else 0)
        if had and had != brokers:
            raise ConfigError(f"This REACH_HOME ({self.home}) holds a {had}-broker setup, not {brokers}: run "
                              "`reach local down` and use another REACH_HOME (its data is kept per home).")
        tls = self._check_tls(st, tls=tls, sasl=sasl, had=bool(had or st.get("redis_port") or st.get("redis_nodes")),
                              brokers=brokers, redis_cluster=redis_cluster)
        self._up_redis(st, redis_cluster)
        if brokers > 1:
            return self._up_cluster(st, brokers, timeout)
        if sasl and process.alive(st.get("kafka_pid")) and not st.get("sasl_bootstrap"):
            process.stop(st.pop("kafka_pid"), timeout=60)
        if not process.alive(st.get("kafka_pid")):
            if sasl and not st.get("sasl_password"):
                st["sasl_password"] = secrets.token_urlsafe(18)  # kept in local.json (0600) for later `up`s
            st.update(self._start_kafka(st, sasl=sasl))
            self._save(st)
        self._wait_broker(st, timeout)
        if tls:
            return self.status()
        listener = _sasl_listener(st)
        if listener is not None:
            self._add_scram_user(st, listener, timeout)
        return self.status()

    def down(self, *, grace_s: float = 60.0) -> list[str]:
        """Stop only the processes this REACH_HOME started, cleanly (SIGTERM, then SIGKILL after `grace_s`: a
        throwaway home whose data goes with it can give its brokers less than a controlled shutdown takes)."""
        st = self._state()
        stopped = []
        nodes = st.get("nodes", [])
        for node in nodes:  # all SIGTERMed first, so their controlled shutdowns overlap
            if process.alive(node.get("pid")):
                os.kill(node["pid"], signal.SIGTERM)
        if [process.stop(node.pop("pid", None), timeout=grace_s) for node in nodes].count(True):
            stopped.append("kafka")
        if process.stop(st.pop("kafka_pid", None), timeout=grace_s):
            stopped.append("kafka")
        if process.stop(st.pop("redis_pid", None)):
            stopped.append("redis")
        cluster = st.get("redis_nodes", [])
        if [process.stop(node.pop("pid", None)) for node in cluster].count(True):
            stopped.append(f"redis cluster ({len(cluster)} masters)")
        st.pop("bootstrap", None)
        st.pop("sasl_bootstrap", None)
        st.pop("redis_url", None)
        self._save(st)
        return stopped

    # -- kafka -----------------------------------------------------------------------------------------
    def _start_kafka(self, st: dict[str, Any], *, sasl: bool) -> dict[str, Any]:
        java, libs = _java(), ensure_jars()
        kdir = self.home / "kafka"
        kdir.mkdir(parents=True, exist_ok=True)
        port, controller_port = _port(st.get("kafka_port")), _port(st.get("controller_port"))
        sasl_port = _port(st.get("sasl_port")) if sasl else None
        tls = self._tls({**st, "bootstrap": f"127.0.0.1:{port}"})
        props = kdir / "server.properties"
        props.touch(mode=0o600)  # with --tls it holds the broker's SCRAM login and its private key
        props.write_text(_server_properties(kdir / "data", port, controller_port, sasl_port, tls=tls))
        classpath = f"{libs}/*"
        if not (kdir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "--standalone",
                 "-t", _cluster_id(), "-c", str(props), *(tls.scram_arguments() if tls else [])],
                capture_output=True, text=True,
            )
            if fmt.returncode != 0:
                raise InfraUnavailable(f"Formatting the Kafka log dir failed:\n{fmt.stdout}{fmt.stderr}")
        log = kdir / "server.log"
        pid = process.spawn(
            [java, *HEAP_FLAGS, "-XX:+UseG1GC", *JIT_FLAGS,
             f"-Dkafka.logs.dir={kdir}", f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
             "-cp", classpath, "kafka.Kafka", str(props)],
            kdir / "stdout.log",
        )
        started: dict[str, Any] = {"kafka_pid": pid, "kafka_port": port, "controller_port": controller_port,
                                   "bootstrap": f"127.0.0.1:{port}", "kafka_log": str(log), "sasl_bootstrap": None}
        if sasl_port is not None:
            started.update(sasl_port=sasl_port, sasl_bootstrap=f"127.0.0.1:{sasl_port}")
        return started

    def _add_scram_user(self, st: dict[str, Any], listener: SaslListener, timeout: float) -> None:
        """Upsert the SCRAM user (KRaft keeps it in the metadata log), then wait until it can log in."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient(_probe_config(str(st["bootstrap"])))
        try:
            for mechanism in SCRAM_MECHANISMS:  # one request each: a user may be altered once per request
                info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), _SCRAM_ITERATIONS)
                upsert = UserScramCredentialUpsertion(listener.username, info, listener.password.encode())
                for future in admin.alter_user_scram_credentials([upsert]).values():
                    future.result(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - librdkafka reports admin failures as KafkaException
            raise InfraUnavailable(f"Creating the local SCRAM user failed: {exc}") from None
        deadline = time.monotonic() + timeout
        while not _broker_answers(listener.bootstrap, 2.0, listener):
            if time.monotonic() > deadline:
                raise InfraUnavailable(f"The SASL listener {listener.bootstrap} did not accept the SCRAM user within "
                                       f"{timeout:.0f}s. See {self.home / 'kafka' / 'server.log'}.")
            time.sleep(0.2)

    def _wait_broker(self, st: dict[str, Any], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        tls = self._tls(st)
        while time.monotonic() < deadline:
            if _broker_answers(st.get("bootstrap"), 2.0, tls=tls):
                return
            if not process.alive(st.get("kafka_pid")):
                break
            time.sleep(0.5)
        kdir = self.home / "kafka"
        reason = "exited" if not process.alive(st.get("kafka_pid")) else f"did not answer within {timeout:.0f}s"
        process.stop(st.get("kafka_pid"))
        raise InfraUnavailable(
            f"The Kafka broker {reason}. Last lines of its logs:\n"
            f"{process.tail(kdir / 'stdout.log', 15)}\n{process.tail(kdir / 'server.log', 25)}"
        )

    # -- a cluster of combined nodes (`--brokers N`) -------------------------------------------------------
    def _up_cluster(self, st: dict[str, Any], brokers: int, timeout: float) -> LocalStatus:
        if not st.get("nodes"):
            st["nodes"] = [{"node_id": i + 1, "port": process.free_port(), "controller_port": process.free_port()}
                           for i in range(brokers)]
        st["bootstrap"] = ",".join(f"127.0.0.1:{n['port']}" for n in st["nodes"])
        self._save(st)
        for node in self.nodes():
            if not process.alive(node.pid):
                self.start_node(node.node_id)
        deadline = time.monotonic() + timeout
        tls = self._tls(st)
        while not _cluster_ready(str(st["bootstrap"]), brokers, tls):
            dead = [n.node_id for n in self.nodes() if not process.alive(n.pid)]
            if dead or time.monotonic() > deadline:
                why = f"node(s) {dead} exited" if dead else f"did not form within {timeout:.0f}s"
                ndir = self.home / "kafka" / f"node-{(dead or [1])[0]}"
                logs = f"{process.tail(ndir / 'stdout.log', 15)}\n{process.tail(ndir / 'server.log', 25)}"
                raise InfraUnavailable(f"The {brokers}-node Kafka cluster {why}. Last lines of its log:\n{logs}")
            time.sleep(0.5)
        return self.status()

    def start_node(self, node_id: int) -> int:
        """(Re)start one cluster node on its recorded ports (its peers know it by them); returns its pid."""
        java, libs = _java(), ensure_jars()
        st = self._state()
        nodes: list[dict[str, Any]] = st["nodes"]
        node = next(n for n in nodes if n["node_id"] == node_id)
        ndir = self.home / "kafka" / f"node-{node_id}"
        ndir.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{n['node_id']}@127.0.0.1:{n['controller_port']}" for n in nodes)
        tls = self._tls(st)
        props = ndir / "server.properties"
        props.touch(mode=0o600)  # with --tls it holds the node's SCRAM login and its private key
        props.write_text(_cluster_properties(ndir / "data", node_id=node_id, port=node["port"],
                                             controller_port=node["controller_port"], voters=voters,
                                             brokers=len(nodes), tls=tls))
        classpath = f"{libs}/*"
        if not (ndir / "data" / "meta.properties").exists():
            st.setdefault("cluster_id", _cluster_id())
            # every node's bootstrap metadata holds the SCRAM user: whichever controller leads serves it
            fmt = subprocess.run([java, "-cp", classpath, "kafka.tools.StorageTool", "format",
                                  "-t", st["cluster_id"], "-c", str(props), *(tls.scram_arguments() if tls else [])],
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise InfraUnavailable(f"Formatting node {node_id}'s log dir failed:\n{fmt.stdout}{fmt.stderr}")
        node["pid"] = process.spawn(
            [java, "-Xms128m", f"-Xmx{CLUSTER_HEAP}", "-XX:+UseSerialGC", *JIT_FLAGS,
             f"-Dkafka.logs.dir={ndir}", f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
             "-cp", classpath, "kafka.Kafka", str(props)],
            ndir / "stdout.log",
        )
        self._save(st)
        return int(node["pid"])

    # -- redis -----------------------------------------------------------------------------------------
    def _up_redis(self, st: dict[str, Any], masters: int) -> None:
        """The single Redis, or the cluster of `masters`; a home keeps the shape it was started with."""
        if masters < 0 or masters > redisnodes.MAX_MASTERS:
            raise ConfigError(f"--redis-cluster {masters}: expected 1 to {redisnodes.MAX_MASTERS} masters (3 is the "
                              "usual), or 0 for the single Redis.")
        had = len(st.get("redis_nodes", []))
        if had and had != masters or not had and masters and st.get("redis_port"):
            shape = f"a {had}-master Redis Cluster" if had else "a single Redis"
            raise ConfigError(f"This REACH_HOME ({self.home}) holds {shape}: run `reach local down` and use another "
                              "REACH_HOME for " + (f"--redis-cluster {masters}" if masters else "the single Redis")
                              + " (its data is kept per home).")
        if masters:
            if not self._redis_running(st):
                st["redis_nodes"] = redisnodes.start_cluster(st.get("redis_nodes", []), self.home, masters)
                st["redis_url"] = redisnodes.cluster_url([n["port"] for n in st["redis_nodes"]])
                self._save(st)
            return
        if not self._redis_running(st):
            st.update(self._start_redis(st))
            self._save(st)

    def _start_redis(self, st: dict[str, Any]) -> dict[str, Any]:
        port = st.get("redis_port")
        port = port if port and redisnodes.listenable(port) else process.free_port()
        tls = self._tls({**st, "redis_port": port})
        pid = redisnodes.start_node(port, self.home / "redis", tls=tls)
        url = tls.redis_url if tls is not None else f"redis://127.0.0.1:{port}/0"
        return {"redis_pid": pid, "redis_port": port, "redis_url": url}

    def _check_tls(self, st: dict[str, Any], *, tls: bool, sasl: bool, had: bool, brokers: int,
                   redis_cluster: int) -> bool:
        """Whether this `up` runs with TLS (asked for, or the home was started so), its passwords and CA made."""
        if had and tls and not st.get("tls"):
            raise ConfigError(f"This REACH_HOME ({self.home}) holds a plaintext broker and Redis: run `reach local "
                              "down` and use another REACH_HOME for --tls (its data is kept per home).")
        tls = tls or bool(st.get("tls"))
        if not tls:
            return False
        if sasl:
            raise ConfigError("--tls already authenticates every client with SCRAM over SASL_SSL: drop --sasl.")
        if redis_cluster:
            raise ConfigError("--tls runs with the single Redis: TLS on a Redis Cluster's client and bus ports, and a "
                              "cluster URL with the CA for every Redis client, are not built (decision 0038). Drop "
                              "--redis-cluster, or drop --tls.")
        certs.ensure(self.home / "tls")
        for key in ("sasl_password", "redis_password"):
            st.setdefault(key, secrets.token_urlsafe(18))  # kept in local.json (0600) for later `up`s
        st["tls"] = True
        self._save(st)
        return True


def _cluster_id() -> str:
    cluster_id = "-"
    while cluster_id.startswith("-"):  # kafka-storage would read a leading "-" as an option (1 in 64)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def _cluster_ready(bootstrap: str, brokers: int, tls: TlsSetup | None = None) -> bool:
    """Every node registered as a broker: a cluster short of one would place no replication-factor-N topic."""
    from confluent_kafka.admin import AdminClient

    try:
        return len(AdminClient(_probe_config(bootstrap, tls=tls)).list_topics(timeout=2.0).brokers) >= brokers
    except Exception:  # noqa: BLE001 - any failure means "not formed yet"
        return False


def _port(saved: int | None) -> int:
    """The port of the last start when it is still free (stable exports), else a new free one."""
    return saved if saved and process.port_free(saved) else process.free_port()


def _sasl_listener(st: dict[str, Any]) -> SaslListener | None:
    if not (st.get("sasl_bootstrap") and st.get("sasl_password")):
        return None
    return SaslListener(bootstrap=str(st["sasl_bootstrap"]), username=SASL_USER, password=str(st["sasl_password"]))


def _server_properties(data: Path, port: int, controller_port: int, sasl_port: int | None = None, *,
                       tls: TlsSetup | None = None) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    sasl = ""
    if sasl_port is not None:
        # brokers and controller keep talking PLAINTEXT; clients opt in to the SASL listener
        listeners += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        sasl = f"sasl.enabled.mechanisms={','.join(SCRAM_MECHANISMS)}\n" + "".join(
            f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;\n" for m in SCRAM_MECHANISMS)
    layout = f"""listeners={listeners},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners={listeners}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
{sasl}"""
    if tls is not None:
        layout = broker_listeners(tls, port=port, controller_port=controller_port)
    return f"""# Written by `reach local up`; regenerated on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
{layout}log.dirs={data}
auto.create.topics.enable=false
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=60000
# one broker sharing a small box with every client: fewer threads, fewer context switches (decision 0025)
num.network.threads=1
num.io.threads=2
background.threads=2
"""


def _cluster_properties(data: Path, *, node_id: int, port: int, controller_port: int, voters: str,
                        brokers: int, tls: TlsSetup | None = None) -> str:
    isr = min(2, brokers)
    layout = f"""listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""
    if tls is not None:  # each node as the single TLS broker is: SASL_SSL (also between nodes), mutual-TLS controller
        layout = broker_listeners(tls, port=port, controller_port=controller_port)
    return f"""# Written by `reach local up --brokers {brokers}`; regenerated on every start.
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
{layout}log.dirs={data}
auto.create.topics.enable=false
num.partitions=1
default.replication.factor={brokers}
offsets.topic.replication.factor={brokers}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={brokers}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={brokers}
share.coordinator.state.topic.min.isr={isr}
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=60000
# a paused follower leaves the ISR after 10 s (Kafka's default: 30 s), so the broker-pause fault stays short
replica.lag.time.max.ms=10000
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.threads=1
"""


def _probe_config(bootstrap: str, sasl: SaslListener | None = None, tls: TlsSetup | None = None) -> dict[str, Any]:
    """A quiet client config for this REACH_HOME's own broker, whatever the caller's REACH_* security says."""
    kafka = KafkaSettings.model_construct(bootstrap=bootstrap)  # no environment: the listener chosen here
    if tls is not None:
        kafka = tls.kafka()
    if sasl is not None:
        kafka = KafkaSettings.model_construct(bootstrap=sasl.bootstrap, security_protocol="SASL_PLAINTEXT",
                                              sasl_mechanism=sasl.mechanism, sasl_username=sasl.username,
                                              sasl_password=SecretStr(sasl.password))
    # the error callback too: a starting broker refuses connections, which is no credential failure to report
    return kafka.admin(**{"socket.connection.setup.timeout.ms": 1000, "log_level": 0, "logger": _QuietLogger(),
                          "error_cb": _ignore})


def _broker_answers(bootstrap: str | None, timeout: float, sasl: SaslListener | None = None,
                    tls: TlsSetup | None = None) -> bool:
    if not bootstrap:
        return False
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient(_probe_config(bootstrap, sasl, tls))
        admin.list_topics(timeout=timeout)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not answering yet"
        return False


_redis_answers = redisnodes.answers


def _ignore(_error: Any) -> None:
    pass


class _QuietLogger:
    """Swallows librdkafka's connection-refused chatter while we poll a starting broker."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return self.log
