"""A2A push notification configs and what they send (pure): the records of `<ns>.push`, their checks, and the
webhook envelopes a task's status changes become (docs/a2a.md#push-notifications, decisions/0042).

A task's configs are one record of the compacted `<ns>.push` topic, keyed by the task id (the message id), the
whole set in its value (JSON), so compaction keeps the last set and a delete is the set without it (a tombstone
when none is left). A config says where (`url`, which the webhook channel's rules must accept: http(s), and a
public address unless the operator allows private ones), the token the receiver checks
(`X-A2A-Notification-Token`) and from which timeline step on it sends (`from_step`: a config set on a running
task hears the changes after it was set; one given with the message hears them all).

Each status change is one `channel.webhook` envelope whose body is the A2A StreamResponse of the change (a
status update, or the result artifact before the final update) and whose id is derived from the task, the config
and the timeline step (`<task>-pn<hash>-<step>[a]`): computing them again (a notifier restarted, two gateways)
yields the same messages, which the channel agent's lease delivers once. Signing, retries on the delay tiers,
the dead letter with its reason and the per-destination health are the webhook channel's.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from a2a.types.a2a_pb2 import StreamResponse, TaskArtifactUpdateEvent, TaskPushNotificationConfig
from google.protobuf.json_format import MessageToDict

from reach.a2a import tasks
from reach.core.progress import Chunks
from reach.errors import ReachError
from reach.records import Envelope, RoutingHints

MAX_CONFIGS = 10  # per task: a caller cannot make one task fan out to any number of receivers
MAX_URL = 2048
MAX_TOKEN = 1024
MAX_ID = 100
TOKEN_HEADER = "X-A2A-Notification-Token"
WEBHOOK = "channel.webhook"
WEBHOOK_VERSION = "^1.0.0"
SOURCE = "reach-a2a-push"
BUDGET_MS = 24 * 3600 * 1000  # a notification keeps being retried (on the delay tiers) for up to a day
DELIVERY_TIMEOUT_MS = 60_000


class BadPushConfig(ReachError):
    """A push config the gateway will not keep: a bad URL (or a non-public one), too long a field, too many."""


@dataclass(frozen=True, slots=True)
class PushConfig:
    """One receiver of a task's status changes."""

    id: str
    url: str
    token: str = ""
    from_step: int = 0  # the absolute timeline step (dropped steps counted) from which changes are sent
    created_at: int = 0
    states: bool = True  # the task's changes of state (A2A StreamResponse bodies)
    progress: bool = False  # the handler's progress and partial results (the gateway's `callback_progress`)

    def to_proto(self, task_id: str) -> TaskPushNotificationConfig:
        return TaskPushNotificationConfig(id=self.id, task_id=task_id, url=self.url, token=self.token)


@dataclass(frozen=True, slots=True)
class TaskPush:
    """The value of a `<ns>.push` record: a task's configs, and whose task it is."""

    task_id: str
    tenant: str
    configs: tuple[PushConfig, ...] = field(default=())

    def get(self, config_id: str) -> PushConfig | None:
        return next((c for c in self.configs if c.id == config_id), None)

    def put(self, config: PushConfig) -> TaskPush:
        """The set with `config` added, or replacing the one of its id; BadPushConfig past MAX_CONFIGS."""
        others = tuple(c for c in self.configs if c.id != config.id)
        if len(others) >= MAX_CONFIGS:
            raise BadPushConfig(f"task {self.task_id[:100]} has {len(others)} push configs, the most a task may "
                                f"have is {MAX_CONFIGS}; delete one (DeleteTaskPushNotificationConfig) first")
        return replace(self, configs=(*others, config))

    def without(self, config_id: str) -> TaskPush:
        return replace(self, configs=tuple(c for c in self.configs if c.id != config_id))

    def encode(self) -> bytes | None:
        """The record's value; None (a tombstone) when no config is left."""
        if not self.configs:
            return None
        return json.dumps({"task_id": self.task_id, "tenant": self.tenant,
                           "configs": [asdict(c) for c in self.configs]}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes) -> TaskPush:
        data = json.loads(value)
        return cls(task_id=str(data["task_id"]), tenant=str(data["tenant"]),
                   configs=tuple(PushConfig(**c) for c in data.get("configs") or []))


def literal_refusal(host: str) -> str | None:
    """Why a URL whose host is an IP literal may not be a push target (loopback, private, metadata ...), else None;
    a name is resolved and judged when it is set and again by the webhook channel at every send."""
    from reach.channels.guard import refused_address  # the channels' one SSRF rule, not a copy of it

    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    return refused_address(host)


def checked(proto: TaskPushNotificationConfig, *, config_id: str, from_step: int, now: int,
            progress: bool = False) -> PushConfig:
    """The config to keep from what the caller sent; BadPushConfig saying what is wrong. `progress`: the caller
    activated the push-progress extension (reach.a2a.cards.PUSH_PROGRESS_EXTENSION): the config also gets the
    handler's progress and chunks."""
    url = proto.url
    parts = urlsplit(url)
    if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadPushConfig(f"push url {url[:200]!r} is not an http(s) URL with a host of at most {MAX_URL} "
                            "characters; expected e.g. https://example.com/a2a/push")
    if len(proto.token) > MAX_TOKEN or "\r" in proto.token or "\n" in proto.token:
        raise BadPushConfig(f"push token is {len(proto.token)} characters or has a line break; at most {MAX_TOKEN} "
                            "characters on one line")
    if len(config_id) > MAX_ID or not config_id.isprintable():
        raise BadPushConfig(f"push config id {config_id[:MAX_ID]!r} is over {MAX_ID} characters or not printable")
    if proto.HasField("authentication"):
        raise BadPushConfig("push authentication is not offered: receivers check the token "
                            f"({TOKEN_HEADER}) and the Reach-Signature of the webhook channel")
    return PushConfig(id=config_id, url=url, token=proto.token, from_step=from_step, created_at=now,
                      progress=progress)


def step_count(row: Mapping[str, Any]) -> int:
    """How many timeline steps the row has had (its dropped ones counted): a config set now starts there."""
    return int(row.get("dropped_steps") or 0) + len(row.get("timeline") or [])


def notification_id(task_id: str, config_id: str, step: int, artifact: bool) -> str:
    tag = hashlib.sha256(config_id.encode()).hexdigest()[:8]
    return f"{task_id}-pn{tag}-{step}{'a' if artifact else ''}"


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook send for one status change (or the result artifact) of a task to one config."""

    message_id: str
    step: int
    body: dict[str, Any]


def notifications(row: Mapping[str, Any], config: PushConfig) -> list[Notification]:
    """Every notification the row owes `config` so far, in order (each time the same ids: the sender keeps a
    cursor of the ones it produced, the channel's lease drops any produced twice)."""
    out = _state_notifications(row, config) if config.states else []
    return out + _progress_notifications(row, config) if config.progress else out


def _state_notifications(row: Mapping[str, Any], config: PushConfig) -> list[Notification]:
    dropped = int(row.get("dropped_steps") or 0)
    start = max(0, config.from_step - dropped)
    events, _, _ = tasks.indexed_updates(row, start, None)
    out = []
    for index, event in events:
        step = dropped + index
        if isinstance(event, TaskArtifactUpdateEvent):
            body = MessageToDict(StreamResponse(artifact_update=event))
            out.append(Notification(notification_id(str(row["message_id"]), config.id, step, True), step, body))
        else:
            body = MessageToDict(StreamResponse(status_update=event))
            out.append(Notification(notification_id(str(row["message_id"]), config.id, step, False), step, body))
    return out


def _progress_notifications(row: Mapping[str, Any], config: PushConfig) -> list[Notification]:
    """The handler's chunks the row holds (one notification each, by generation, attempt and seq) and its last
    fraction and note (one per time it changed), as the `event: chunk` / `event: progress` frames of the SSE
    route carry them."""
    raw = row.get("progress")
    if raw is None:
        return []
    progress = Chunks.model_validate(raw)
    task_id, generation = str(row["message_id"]), int(row.get("generation") or 0)
    tag = hashlib.sha256(config.id.encode()).hexdigest()[:8]
    head = {"message_id": task_id, "trace_id": row.get("trace_id"), "capability": row.get("capability"),
            "generation": generation, "attempt": progress.attempt}
    out = []
    if progress.fraction is not None or progress.note is not None:
        out.append(Notification(f"{task_id}-pp{tag}-{generation}.{progress.attempt}.{progress.at}", -1,
                                {**head, "event": "progress", "fraction": progress.fraction, "note": progress.note}))
    for chunk in progress.chunks:
        data = json.loads(chunk.data) if chunk.kind == "json" else chunk.data
        out.append(Notification(f"{task_id}-pc{tag}-{generation}.{progress.attempt}.{chunk.seq}", -1,
                                {**head, "event": "chunk", "seq": chunk.seq, "kind": chunk.kind, "data": data,
                                 "append": chunk.append}))
    return out


def payload(notification: Notification, config: PushConfig, task_id: str) -> dict[str, Any]:
    """The channel.webhook request: the receiver, the notification's body, the token header."""
    out: dict[str, Any] = {"endpoint": config.url, "body": notification.body,
                           "subject": f"Reach: {task_id[:100]} update"}
    if config.token:
        out["headers"] = {TOKEN_HEADER: config.token}
    return out


def envelope(notification: Notification, config: PushConfig, task: TaskPush, *, trace_id: str, now: int) -> Envelope:
    """The channel.webhook envelope of one notification: in the task's trace, its parent the task, the task's
    tenant (whose webhook secret signs it), keyed by the task so one task's notifications share a partition."""
    return Envelope(
        message_id=notification.message_id, trace_id=trace_id, parent_id=task.task_id, tenant=task.tenant,
        source=SOURCE, capability=WEBHOOK, capability_version=WEBHOOK_VERSION,
        payload=json.dumps(payload(notification, config, task.task_id), separators=(",", ":")).encode(),
        created_at=now, deadline=now + BUDGET_MS, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        idempotency_key=notification.message_id, routing=RoutingHints(session_key=f"push:{task.task_id}"[:256]),
    )
