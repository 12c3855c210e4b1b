"""Consumer-group admin requests (describe a group, its committed offsets) made by a child process.

librdkafka aborts the whole process in these coordinator requests when a broker dies mid-request
(`rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed`,
confluent-kafka 2.16.1 / librdkafka 2.16.0): `describe_consumer_groups` alone, from three threads, while the
brokers of a three-node cluster are SIGKILLed and restarted in turn, aborted within 40 s (the reproduction is in
docs/decisions/0021-group-admin-in-a-child-process.md). The router asks for its group's members every two
seconds and for consumer lag every fifteen, so a broker fault took the routing worker down with it. Here a
child process (`python -m reach.streams.groupadmin`) makes the requests: when librdkafka aborts, only the
child dies, the pending requests fail, and the next request starts another child.

`GroupAdmin` answers the two AdminClient calls its callers make, with results shaped like confluent-kafka's
(`.members[].client_id`, `.members[].assignment.topic_partitions`; `.topic_partitions[].offset`), so a caller
takes either it or an AdminClient (or a fake in a unit test).
"""

from __future__ import annotations

import concurrent.futures
import faulthandler
import hashlib
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, cast

from pydantic import SecretStr

from reach.kafka import clients
from reach.kafka.groups import Assignment, GroupDescription, GroupOffsets, Member
from reach.kafka.types import ConsumerGroupTopicPartitions, TopicPartition
from reach.settings import KafkaSettings
from reach.streams.exceptions import StreamsError

log = logging.getLogger("reach.router")

GRACE_S = 5.0
"""How much longer than its request_timeout the parent waits for an answer before failing the request itself
(librdkafka can leave a coordinator request's future pending for good, confluentinc/librdkafka#4605)."""

HUNG_AFTER = 3
"""Consecutive requests a live child leaves unanswered before it is killed and replaced: a child stuck in a
coordinator request that never returns would otherwise expire every later request for good."""

RESTART_AFTER_S = 1.0
"""The shortest gap between two child starts: a child that dies at once (say, a bad config) is not respawned in
a loop; requests in between fail at once."""


class GroupAdminError(StreamsError):
    """A consumer-group request failed: the broker's answer, a timeout, or the child process died."""


class GroupRequests(Protocol):
    """What Owners, consumer_lag and the router's member count call (an AdminClient, a GroupAdmin, a fake)."""

    def describe_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, Any]: ...

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[Any],
                                    **kwargs: Any) -> dict[str, Any]: ...


def settings_payload(kafka: KafkaSettings) -> dict[str, Any]:
    """The settings as JSON for the child's stdin (secrets included: never on argv or in the environment)."""
    data = kafka.model_dump(mode="json")
    for name, value in kafka.model_dump().items():
        if isinstance(value, SecretStr):
            data[name] = value.get_secret_value()
    return data


def description_of(raw: dict[str, Any]) -> GroupDescription:
    return GroupDescription(group_id=raw["group_id"], state=raw["state"], members=[
        Member(client_id=m["client_id"], assignment=Assignment([TopicPartition(t, p) for t, p in m["partitions"]]))
        for m in raw["members"]])


def offsets_of(raw: dict[str, Any]) -> GroupOffsets:
    return GroupOffsets(group_id=raw["group_id"],
                        topic_partitions=[TopicPartition(t, p, o) for t, p, o in raw["offsets"]])


_DECODERS = {"describe": description_of, "offsets": offsets_of}


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    pending: dict[int, tuple[str, concurrent.futures.Future[Any]]] = field(default_factory=dict)
    unanswered: int = 0  # requests expired in a row since its last answer


class GroupAdmin:
    """AdminClient's consumer-group requests, answered by a child process that is restarted when it dies."""

    def __init__(self, kafka: KafkaSettings, *, command: list[str] | None = None) -> None:
        self._payload = (json.dumps(settings_payload(kafka)) + "\n").encode()
        self._command = command or [sys.executable, "-m", "reach.streams.groupadmin"]
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._child: _Child | None = None
        self._started_at = float("-inf")
        self.restarts = 0  # children started after the first (each one after a death)

    # -- the AdminClient surface -------------------------------------------------------------------------
    def describe_consumer_groups(self, group_ids: list[str],
                                 **kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        """`request_timeout` (s, default 10) is the only option, as in AdminClient."""
        timeout = float(kwargs.get("request_timeout", 10.0))
        return {g: self._request("describe", g, timeout) for g in group_ids}

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: list[Any],
                                    **kwargs: Any) -> dict[str, concurrent.futures.Future[Any]]:
        timeout = float(kwargs.get("request_timeout", 10.0))
        return {r.group_id: self._request("offsets", r.group_id, timeout) for r in list_consumer_group_offsets_request}

    def close(self) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is not None and child.proc.stdin is not None:
            child.proc.stdin.close()  # the child ends when its stdin does
            try:
                child.proc.wait(10)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(5)

    # -- requests ------------------------------------------------------------------------------------------
    def _request(self, op: str, group: str, timeout: float) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        request_id = next(self._ids)
        line = (json.dumps({"id": request_id, "op": op, "group": group, "timeout": timeout}) + "\n").encode()
        with self._lock:
            child = self._running()
            if child is None:
                future.set_exception(GroupAdminError("the group admin process is restarting; try again"))
                return future
            child.pending[request_id] = (op, future)
            try:
                assert child.proc.stdin is not None
                child.proc.stdin.write(line)
                child.proc.stdin.flush()
            except OSError as exc:  # it died between the check and the write: its reader fails the rest
                child.pending.pop(request_id, None)
                future.set_exception(GroupAdminError(f"the group admin process is gone: {exc}"))
                return future
        timer = threading.Timer(timeout + GRACE_S, self._expire, args=(child, request_id, timeout))
        timer.daemon = True
        timer.start()
        return future

    def _running(self) -> _Child | None:
        """The live child, started (again) when there is none; None while a dead one is too recent."""
        child = self._child
        if child is not None and child.proc.poll() is None:
            return child
        if time.monotonic() - self._started_at < RESTART_AFTER_S:
            return None
        if child is not None:
            self.restarts += 1
            # -6 (SIGABRT) is librdkafka's assertion in a coordinator request across a broker loss
            log.warning("the group admin process exited %s; starting another", child.proc.returncode)
        self._started_at = time.monotonic()
        # stderr stays the parent's: a crash's stacks land in the worker's log
        proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env())
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(self._payload)
        proc.stdin.flush()
        self._child = _Child(proc)
        threading.Thread(target=self._read, args=(self._child, proc.stdout), name="reach-group-admin",
                         daemon=True).start()
        return self._child

    def _read(self, child: _Child, out: IO[bytes]) -> None:
        for raw in out:
            try:
                answer = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                child.unanswered = 0
                entry = child.pending.pop(answer.get("id"), None)
            if entry is None:
                continue  # expired meanwhile
            op, future = entry
            if "error" in answer:
                future.set_exception(GroupAdminError(answer["error"]))
                continue
            try:
                future.set_result(_DECODERS[op](answer["ok"]))
            except (KeyError, TypeError, ValueError) as exc:  # never let one odd answer end this reader
                future.set_exception(GroupAdminError(f"the group admin process answered {op} oddly: {exc!r}"))
        code = child.proc.wait()
        with self._lock:
            left, child.pending = list(child.pending.values()), {}
        for _, future in left:
            future.set_exception(GroupAdminError(f"the group admin process exited {code} before answering"))

    def _expire(self, child: _Child, request_id: int, timeout: float) -> None:
        with self._lock:
            entry = child.pending.pop(request_id, None)
            if entry is not None:
                child.unanswered += 1
            hung = child.unanswered >= HUNG_AFTER and child.proc.poll() is None
        if hung:  # its reader then fails what is left, and the next request starts another child
            log.warning("the group admin process left %d requests in a row unanswered; replacing it", HUNG_AFTER)
            child.proc.kill()
            child.proc.wait(5)  # gone before the caller hears of it: its next request finds no live child
        if entry is not None:
            entry[1].set_exception(GroupAdminError(f"no answer within {timeout + GRACE_S:.0f}s"))


def _child_env() -> dict[str, str]:
    """The parent's environment, with this very `reach` package first on the path (the child runs the same code)."""
    here = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


_SHARED: dict[str, GroupAdmin] = {}
_SHARED_LOCK = threading.Lock()


def shared(kafka: KafkaSettings) -> GroupAdmin:
    """One GroupAdmin (one child) per process and cluster, for every caller in it; on an in-process bus
    (reach.kafka.memory) its admin client, which cannot abort the process."""
    if clients.in_memory(kafka):
        return cast(GroupAdmin, clients.admin(kafka))
    # the secrets too (model_dump_json masks them): settings that differ only in a password get their own child
    key = hashlib.sha256(json.dumps(settings_payload(kafka), sort_keys=True).encode()).hexdigest()
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = GroupAdmin(kafka)
        return _SHARED[key]


# -- the child -------------------------------------------------------------------------------------------------

def _answer(admin: Any, op: str, group: str, timeout: float) -> dict[str, Any]:
    if op == "describe":
        desc = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout=timeout + 1)
        return {"group_id": group, "state": str(getattr(desc.state, "name", desc.state)), "members": [
            {"client_id": m.client_id or "",
             "partitions": [[tp.topic, tp.partition] for tp in (m.assignment.topic_partitions if m.assignment
                                                                 else [])]}
            for m in desc.members]}
    if op == "offsets":
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=timeout)[group].result(timeout=timeout + 1)
        return {"group_id": group,
                "offsets": [[tp.topic, tp.partition, tp.offset] for tp in result.topic_partitions or []]}
    raise GroupAdminError(f"unknown request {op!r}: expected describe or offsets")


def _admin_client(kafka: KafkaSettings) -> Any:
    return clients.admin(kafka)


def child_main(stdin: IO[str], stdout: IO[str], make_admin: Callable[[KafkaSettings], Any] = _admin_client) -> None:
    """Answer one JSON request a line, each on a thread of its own, until stdin closes."""
    admin = make_admin(KafkaSettings.model_validate(json.loads(stdin.readline())))
    out = threading.Lock()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="group-admin")

    def serve(request: dict[str, Any]) -> None:
        try:
            reply: dict[str, Any] = {"id": request["id"], "ok": _answer(admin, request["op"], request["group"],
                                                                         float(request["timeout"]))}
        except concurrent.futures.TimeoutError:
            reply = {"id": request["id"], "error": f"no answer from the broker within {request['timeout']}s"}
        except Exception as exc:  # noqa: BLE001 - every failure is the parent's to judge
            reply = {"id": request["id"], "error": f"{type(exc).__name__}: {exc}"}
        with out:
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()

    for line in stdin:
        if line.strip():
            pool.submit(serve, json.loads(line))
    pool.shutdown(wait=True, cancel_futures=False)  # answers still on their way are written before exit


if __name__ == "__main__":
    faulthandler.enable(all_threads=True)
    child_main(sys.stdin, sys.stdout)
    sys.stdout.flush()
    # no cleanup to do, and librdkafka's destroy can wait for good on a coordinator request (librdkafka#3470):
    # a child left running after its parent would be an orphan
    os._exit(0)
