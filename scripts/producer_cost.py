"""What a producer's compression and linger cost: its CPU, the broker's CPU, bytes on the log and ack latency.

Records of Reach's own kinds, built with its encoders and all distinct (ids, times and texts vary as in
traffic): `receipt` (STARTED and COMPLETED, alternating, ~180 bytes), `envelope` (a ~300-character prompt,
~500 bytes) and `status` (the fold's row after STARTED and after COMPLETED, alternating, orjson of the whole row
as the fold writes it, ~970 bytes). Each run produces to its own fresh 4-partition topic, keyed by message id,
with `KafkaSettings.producer()` and the variant's `compression.type` and `linger.ms`, in one of three modes:
`paced` (one record at a time at --rate, never flushed: the agent's receipts, the gateway's publishes),
`batched` (--batch records then a flush, at --rate: the router's and the fold's loops) or `burst` (--burst
records as fast as the client takes them). Every variant runs --repeats times, the variants alternating. Per
1,000 records: this process's CPU (librdkafka's threads included), the broker JVM's CPU (the process listening on
the bootstrap port), and the bytes its partitions' .log files grew by; the delivery reports' produce->ack latency
p50 / p99. Decision 0052 quotes its runs:

    .venv/bin/python scripts/producer_cost.py --mode paced,burst --linger 2
    .venv/bin/python scripts/producer_cost.py --mode paced --kind receipt --compression lz4 --linger 0,2,20
    .venv/bin/python scripts/producer_cost.py --mode paced,batched --kind receipt --compression lz4 \
        --linger 0,2,20 --rate 1500 --seconds 4

Run it against a broker no one else uses (REACH_BOOTSTRAP): the broker's CPU is read for the whole process.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psutil  # noqa: E402
from confluent_kafka import KafkaError, Message, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from reach.core import lifecycle  # noqa: E402
from reach.envelopes import new_envelope  # noqa: E402
from reach.kafka import codec  # noqa: E402
from reach.receipts import receipt_for, started_bytes  # noqa: E402
from reach.records import Status  # noqa: E402
from reach.settings import KafkaSettings  # noqa: E402

PARTITIONS = 4
POOL = 4_000  # distinct records per kind, produced in turn
WORDS = ("the order shipped late because the carrier lost a label so please refund the customer and tell them "
         "when a new parcel leaves our warehouse with tracking details summary invoice account balance march "
         "april billing address changed twice this year escalate to a human if the amount is over fifty").split()


@dataclass(frozen=True, slots=True)
class Variant:
    mode: str  # paced | batched | burst
    kind: str  # receipt | envelope | status
    compression: str
    linger_ms: int

    @property
    def label(self) -> str:
        return f"{self.mode:7} {self.kind:8} {self.compression:5} linger {self.linger_ms:>2}"


@dataclass(frozen=True, slots=True)
class Result:
    records: int
    producer_ms: float  # per 1,000 records
    broker_ms: float
    log_bytes: float  # per record
    p50_ms: float
    p99_ms: float


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def records(kind: str, rng: random.Random) -> list[tuple[bytes, bytes]]:
    """POOL distinct (key, value) records of `kind`."""
    out: list[tuple[bytes, bytes]] = []
    for i in range(POOL):
        envelope = new_envelope("support.triage", {"text": _text(rng, 300)}, tenant=f"tenant-{rng.randrange(20)}")
        started = receipt_for(envelope, Status.STARTED, agent_id="triage-agent", instance_id="triage-agent-7f3a")
        completed = receipt_for(envelope, Status.COMPLETED, agent_id="triage-agent", instance_id="triage-agent-7f3a",
                                result=orjson.dumps({"label": rng.choice(WORDS), "score": rng.random()}))
        if kind == "receipt":
            value = (started_bytes(envelope, agent_id="triage-agent", instance_id="triage-agent-7f3a") if i % 2
                     else codec.encode(completed))
        elif kind == "envelope":
            value = codec.encode(envelope)
        else:
            row = lifecycle.fold(None, started)
            value = orjson.dumps((lifecycle.fold(row, completed) if i % 2 else row).model_dump(mode="json"))
        out.append((envelope.message_id.encode(), value))
    return out


def broker(bootstrap: str) -> tuple[psutil.Process, Path]:
    """The broker process listening on the bootstrap port, and its log directory (from server.properties)."""
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid)
    process = psutil.Process(pid)
    properties = Path(process.cmdline()[-1])
    for line in properties.read_text().splitlines():
        if line.startswith("log.dirs="):
            return process, Path(line.split("=", 1)[1].split(",")[0])
    raise SystemExit(f"no log.dirs in {properties}")


def log_bytes(log_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for p in range(PARTITIONS) for f in (log_dir / f"{topic}-{p}").glob("*.log"))


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def settle(jvm: psutil.Process, quiet_cores: float = 0.05, limit_s: float = 60.0) -> float:
    """Wait until the broker spends less than `quiet_cores` for a whole second (topics created or deleted keep
    it busy for seconds); returns that last second's rate."""
    deadline = time.monotonic() + limit_s
    while True:
        before = cpu_s(jvm)
        time.sleep(1.0)
        rate = cpu_s(jvm) - before
        if rate < quiet_cores or time.monotonic() > deadline:
            return rate


@dataclass(frozen=True, slots=True)
class Load:
    rate: float  # records per second (paced, batched)
    seconds: float
    batch: int  # records per flush (batched)
    burst: int  # records (burst)


Report = Callable[[KafkaError | None, Message], None]


def run(variant: Variant, pool: list[tuple[bytes, bytes]], *, kafka: KafkaSettings, topic: str,
        jvm: psutil.Process, log_dir: Path, load: Load) -> Result:
    latencies: list[float] = []
    failures: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
        else:
            latencies.append(msg.latency() or 0.0)

    overrides = {"compression.type": variant.compression, "linger.ms": variant.linger_ms}
    producer = Producer(kafka.producer(profile="hot", **overrides))
    for p in range(PARTITIONS):  # connections and the producer id, outside the measurement
        producer.produce(topic, key=b"warm", value=b"warm", partition=p)
    producer.flush(30)
    n = load.burst if variant.mode == "burst" else int(load.rate * load.seconds)
    items = (pool[i % len(pool)] for i in range(n))
    done = threading.Event()
    acks = threading.Thread(target=_serve, args=(producer, done), daemon=True)  # as the agent's and gateway's do
    bytes0, jvm0, own0 = log_bytes(log_dir, topic), cpu_s(jvm), time.process_time()
    acks.start()
    MODES[variant.mode](producer, topic, items, report, load)
    left = producer.flush(60)
    done.set()
    acks.join()
    if left:
        raise SystemExit(f"{variant.label}: not acknowledged within 60 s")
    own, broker_cpu = time.process_time() - own0, cpu_s(jvm) - jvm0
    grown = log_bytes(log_dir, topic) - bytes0
    if failures:
        raise SystemExit(f"{variant.label}: {len(failures)} failed, first {failures[0]}")
    q = statistics.quantiles(latencies, n=100)
    return Result(n, own * 1e6 / n, broker_cpu * 1e6 / n, grown / n, q[49] * 1e3, q[98] * 1e3)


def _serve(producer: Producer, done: threading.Event) -> None:
    """Serve the delivery reports as they come, so an ack's latency is not the pace's."""
    while not done.is_set():
        producer.poll(0.05)


def _wait(due: float) -> None:
    if (wait := due - time.monotonic()) > 0:
        time.sleep(wait)


def _paced(producer: Producer, topic: str, items: Iterator[tuple[bytes, bytes]], report: Report, load: Load) -> None:
    """One record at a time, never flushed: the agent's receipts, the gateway's publishes."""
    start = time.monotonic()
    for i, (key, value) in enumerate(items):
        _wait(start + i / load.rate)
        producer.produce(topic, key=key, value=value, on_delivery=report)


def _batched(producer: Producer, topic: str, items: Iterator[tuple[bytes, bytes]], report: Report,
             load: Load) -> None:
    """`batch` records, then a flush, at the same record rate: the router's and the status fold's loops."""
    start, i = time.monotonic(), 0
    for key, value in items:
        if i % load.batch == 0 and i:
            producer.flush(30)
            _wait(start + i / load.rate)
        producer.produce(topic, key=key, value=value, on_delivery=report)
        i += 1


def _burst(producer: Producer, topic: str, items: Iterator[tuple[bytes, bytes]], report: Report, _: Load) -> None:
    """As fast as the client takes them, flushed at the end."""
    for key, value in items:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=report)
                break
            except BufferError:
                time.sleep(0.01)


MODES: dict[str, Callable[[Producer, str, Iterator[tuple[bytes, bytes]], Report, Load], None]] = {
    "paced": _paced, "batched": _batched, "burst": _burst}


def variants(args: argparse.Namespace) -> list[Variant]:
    """In each mode, each kind with each compression at linger 2 ms (the default), then linger 0/5/20 ms for
    receipts without and with lz4; less whatever the filters leave out."""
    grid = [Variant(mode, kind, comp, 2) for mode in MODES for kind in ("receipt", "envelope", "status")
            for comp in ("none", "lz4", "zstd")]
    grid += [Variant(mode, "receipt", comp, linger) for mode in MODES for linger in (0, 5, 20)
             for comp in ("none", "lz4")]
    return [v for v in grid if ((not args.mode or v.mode in args.mode) and (not args.kind or v.kind in args.kind)
                                and (not args.linger or v.linger_ms in args.linger)
                                and (not args.compression or v.compression in args.compression))]


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="records per second when paced")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a paced run")
    parser.add_argument("--burst", type=int, default=30_000, help="records in a burst")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=20, help="records per flush when batched")
    parser.add_argument("--mode", type=_list, default=[], help="e.g. paced,burst (default: also batched)")
    parser.add_argument("--kind", type=_list, default=[], help="e.g. receipt,envelope (default: all three)")
    parser.add_argument("--compression", type=_list, default=[], help="e.g. none,lz4 (default: also zstd)")
    parser.add_argument("--linger", type=lambda t: [int(x) for x in _list(t)], default=[],
                        help="e.g. 0,2 (default: 0,2,5,20)")
    args = parser.parse_args()
    kafka = KafkaSettings()
    jvm, log_dir = broker(kafka.servers())
    rng = random.Random(23)
    pools = {kind: records(kind, rng) for kind in ("receipt", "envelope", "status")}
    sizes = {kind: statistics.mean(len(v) for _, v in pool) for kind, pool in pools.items()}
    todo = variants(args)
    load = Load(rate=args.rate, seconds=args.seconds, batch=args.batch, burst=args.burst)
    prefix = f"producer-cost-{uuid.uuid4().hex[:6]}"
    topics = {(rep, v): f"{prefix}.{rep}.{i}" for rep in range(args.repeats) for i, v in enumerate(todo)}
    warm = f"{prefix}.warm"
    names = [warm, *topics.values()]
    admin = AdminClient(kafka.admin())
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
        future.result()
    results: dict[Variant, list[Result]] = {v: [] for v in todo}
    try:
        for v in (Variant("paced", "receipt", "lz4", 2), Variant("burst", "receipt", "lz4", 2)):  # a warm JIT
            run(v, pools[v.kind], kafka=kafka, topic=warm, jvm=jvm, log_dir=log_dir,
                load=load)
        settle(jvm)
        load0 = os.getloadavg()
        idle0, t0 = cpu_s(jvm), time.monotonic()
        time.sleep(3)
        idle_cores = (cpu_s(jvm) - idle0) / (time.monotonic() - t0)
        for rep in range(args.repeats):
            for v in todo:
                settle(jvm)
                r = run(v, pools[v.kind], kafka=kafka, topic=topics[(rep, v)], jvm=jvm, log_dir=log_dir,
                        load=load)
                results[v].append(r)
                print(f"{v.label}: producer {r.producer_ms:6.0f} broker {r.broker_ms:6.0f} ms/1k, "
                      f"{r.log_bytes:5.0f} B/rec, p50 {r.p50_ms:5.1f} p99 {r.p99_ms:6.1f} ms", file=sys.stderr)
    finally:
        for future in admin.delete_topics(names).values():
            future.exception()
    print("record sizes (mean bytes): " + ", ".join(f"{k} {s:.0f}" for k, s in sizes.items()))
    print(f"broker idle: {idle_cores * 1e3:.0f} ms per s ({idle_cores * 1e3 / args.rate * 1e3:.0f} ms per 1,000 "
          f"records at {args.rate:.0f}/s); load average at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    print("\n| mode | kind | compression | linger.ms | producer CPU ms / 1k | broker CPU ms / 1k | "
          "log bytes / record | ack p50 ms | ack p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for v, rs in results.items():
        cols = [" / ".join(format(value, fmt) for value in values) for values, fmt in (
            ([r.producer_ms for r in rs], ".0f"), ([r.broker_ms for r in rs], ".0f"),
            ([r.log_bytes for r in rs], ".0f"), ([r.p50_ms for r in rs], ".1f"), ([r.p99_ms for r in rs], ".1f"))]
        print(f"| {v.mode} | {v.kind} | {v.compression} | {v.linger_ms} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
