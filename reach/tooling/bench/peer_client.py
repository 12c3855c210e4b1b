"""The peers' client: requests at a paced open-loop rate, replies read back from the reply topic, a step per command.

    python -m reach.tooling.bench.peer_client REQUESTS REPLIES

Commands come on stdin, one JSON object a line, and each gets one JSON line on stdout:
- `{"op": "probe", "timeout_s": T}`: one request every half second until a reply comes back (the worker's group
  holds its partitions): `{"ready": bool}`.
- `{"op": "step", "tag": G, "rate": R, "count": N, "drain_s": D}`: N requests at R/s on schedule (a request's
  created_at is its scheduled send time, so a late sender counts), then until every one has its reply, D seconds
  pass, or nothing arrives for 20 s: `{"messages", "replied", "duplicated", "latency", "read_latency"}`.
- `{"op": "missing", "wait_s": D}`: how many requests sent so far still have no reply after waiting up to D s.

A request is the bench's ~390-byte JSON payload keyed by its correlation id, with the `correlation_id`, `reply_to`
and `content-type` headers FastStream's request-reply reads; the plain worker reads the same. `latency` runs from
created_at to the reply record's timestamp (set when the worker produced it: the point Reach's COMPLETED receipt
`at` marks), `read_latency` to the moment this client read the reply. The producer is the one Reach's open-loop
sender uses (`KafkaSettings.producer()`: idempotent, acks=all, lz4, linger 2 ms).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from dataclasses import asdict
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Message, Producer, TopicPartition

from reach.settings import KafkaSettings
from reach.tooling.bench import pacing
from reach.tooling.bench.results import latency
from reach.tooling.bench.workspace import PAYLOAD

CORRELATION_ID, REPLY_TO, CONTENT_TYPE = "correlation_id", "reply_to", "content-type"
BODY = json.dumps(PAYLOAD | {"pad": "x" * 170}).encode()  # the size of the bench's Reach envelope


def correlation_id(msg: Message) -> bytes | None:
    """A record's `correlation_id` header."""
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    value = next((v for k, v in pairs if k == CORRELATION_ID and v), None)
    return value.encode() if isinstance(value, str) else value


class Client:
    """One producer sending requests, one thread reading replies into `replies` (id -> (reply at, read at))."""

    def __init__(self, kafka: KafkaSettings, requests: str, replies: str) -> None:
        self.requests, self.replies_topic = requests, replies
        self.producer = Producer(kafka.producer(profile="hot"))
        self.consumer = Consumer(kafka.consumer(f"peer-client-{uuid.uuid4().hex[:8]}", profile="hot"))
        parts = self.consumer.list_topics(replies, timeout=10).topics[replies].partitions
        self.consumer.assign([TopicPartition(replies, p, OFFSET_END) for p in parts])
        self.created: dict[str, int] = {}
        self.replies: dict[str, tuple[int, int]] = {}
        self.duplicated = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="peer-client-replies", daemon=True)
        self._reader.start()

    def send(self, tag: str, rate: float, count: int) -> dict[str, int]:
        """`count` requests at `rate`/s on schedule, never waiting for acks until the end; created_at per id."""
        created: dict[str, int] = {}
        for seq, at in pacing.schedule(rate, count):
            cid = f"{tag}-{seq:08d}"
            with self._lock:
                self.created[cid] = created[cid] = at
            headers: list[tuple[str, str | bytes | None]] = [
                (CORRELATION_ID, cid.encode()), (REPLY_TO, self.replies_topic.encode()),
                (CONTENT_TYPE, b"application/json")]
            pacing.produce(self.producer, partial(self.producer.produce, self.requests, key=cid.encode(), value=BODY,
                                                  headers=headers))
        if self.producer.flush(60):
            raise RuntimeError("the peers' client: requests not acknowledged within 60 s")
        return created

    def wait(self, ids: set[str], timeout: float, idle_cutoff: float = 20.0) -> set[str]:
        """Until every id has its reply, `timeout` passes, or nothing arrived for `idle_cutoff`: the ids still open."""
        deadline, last, changed = time.monotonic() + timeout, len(ids), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - changed < idle_cutoff:
            with self._lock:
                ids = {i for i in ids if i not in self.replies}
            if not ids:
                break
            if len(ids) != last:
                last, changed = len(ids), time.monotonic()
            time.sleep(0.05)
        return ids

    def step(self, tag: str, rate: float, count: int, drain_s: float) -> dict[str, Any]:
        created = self.send(tag, rate, count)
        self.wait(set(created), drain_s)
        with self._lock:
            done = {i: self.replies[i] for i in created if i in self.replies}
            duplicated = self.duplicated
        lat = latency((done[i][0] - at for i, at in created.items() if i in done), "created_at -> reply produced")
        read = latency((done[i][1] - at for i, at in created.items() if i in done), "created_at -> reply read")
        return {"messages": len(created), "replied": len(done), "duplicated": duplicated,
                "latency": asdict(lat) if lat else None, "read_latency": asdict(read) if read else None}

    def probe(self, timeout: float) -> bool:
        deadline, seq = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            sent = self.send(f"probe{seq}", 1.0, 1)
            seq += 1
            if not self.wait(set(sent), 0.5):
                return True
        return False

    def missing(self, wait_s: float) -> dict[str, int]:
        with self._lock:
            ids = set(self.created)
        still = self.wait(ids, wait_s)
        return {"missing": len(still), "duplicated": self.duplicated}

    def close(self) -> None:
        self._stop.set()
        self._reader.join(5)
        self.consumer.close()
        self.producer.flush(10)

    def _read(self) -> None:
        while not self._stop.is_set():
            first = self.consumer.poll(0.05)
            if first is None:
                continue
            batch = [first, *self.consumer.consume(999, 0)]
            now = int(time.time() * 1000)
            with self._lock:
                for msg in batch:
                    if msg.error() is not None:
                        continue
                    raw = correlation_id(msg)
                    cid = raw.decode() if raw is not None else None
                    if cid is None or cid not in self.created:
                        continue
                    if cid in self.replies:
                        self.duplicated += 1
                    else:
                        self.replies[cid] = (msg.timestamp()[1], now)


def main(argv: list[str]) -> None:
    requests, replies = argv
    client = Client(KafkaSettings(), requests, replies)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command["op"]
            if op == "probe":
                answer: dict[str, Any] = {"ready": client.probe(float(command["timeout_s"]))}
            elif op == "step":
                answer = client.step(command["tag"], float(command["rate"]), int(command["count"]),
                                     float(command["drain_s"]))
            elif op == "missing":
                answer = client.missing(float(command["wait_s"]))
            else:
                answer = {"error": f"unknown op {op!r}"}
            print(json.dumps(answer), flush=True)
    finally:
        client.close()


if __name__ == "__main__":
    main(sys.argv[1:])
