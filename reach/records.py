"""Pydantic mirrors of the reach.v1 Avro records; the .avsc files in schemas/avro are the truth."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def to_epoch_millis(value: Any) -> Any:
    """Turn a datetime into integer epoch millis (naive means UTC); pass anything else through."""
    # Readers that honour logicalType (plain fastavro, the Confluent deserializer) yield datetimes.
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (aware - _EPOCH) // _MILLISECOND
    return value


EpochMillis = Annotated[int, BeforeValidator(to_epoch_millis)]
"""A timestamp-millis value: integer milliseconds since the Unix epoch, UTC."""


class Status(StrEnum):
    """The status a receipt reports for one step of a message (Avro enum ReceiptStatus)."""

    ACCEPTED = "ACCEPTED"
    ROUTED = "ROUTED"
    STARTED = "STARTED"
    ATTEMPT_FAILED = "ATTEMPT_FAILED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    UNROUTABLE = "UNROUTABLE"
    EXPIRED = "EXPIRED"
    DEAD_LETTERED = "DEAD_LETTERED"
    SENT = "SENT"  # a channel's provider accepted the send (v5)
    DELIVERED = "DELIVERED"  # the provider confirmed delivery (v5)
    READ = "READ"  # the provider reported the recipient read it (v5)
    CALLBACKED = "CALLBACKED"  # on the original message: its callback reached DELIVERED (v5)
    UNKNOWN = "UNKNOWN"  # the enum default: what a reader makes of a status added after its schema
    CANCELED = "CANCELED"  # the caller cancelled it before an agent started it (v6, terminal)
    INTENT_RESOLVED = "INTENT_RESOLVED"  # the resolver turned an intent into a capability or a handoff (v6)
    PROGRESS = "PROGRESS"  # a handler's progress or partial results, coalesced by the agent SDK (v7, never terminal)
    INPUT_REQUIRED = "INPUT_REQUIRED"  # the handler asked the caller a question (NeedsInput, v8, never terminal)
    FANNED_OUT = "FANNED_OUT"  # a fan-out parent's deliveries were sent, or one of them ended (v10, never terminal)
    BOUNCED = "BOUNCED"  # a provider reported the channel send undeliverable (an email DSN; v11, never terminal)

    @property
    def is_terminal(self) -> bool:
        """True when no later status can replace this one for the same (message_id, generation)."""
        return self in TERMINAL


TERMINAL: frozenset[Status] = frozenset(
    {
        Status.COMPLETED,
        Status.FAILED,
        Status.REJECTED,
        Status.UNROUTABLE,
        Status.EXPIRED,
        Status.DEAD_LETTERED,
        Status.CANCELED,
    }
)


DELIVERY: frozenset[Status] = frozenset({Status.SENT, Status.DELIVERED, Status.READ, Status.CALLBACKED,
                                         Status.BOUNCED})
"""Delivery steps of a channel send: never terminal, and the status fold keeps them in the timeline only."""


class StepStatus(StrEnum):
    """How a handler's step ended, independent of delivery."""

    OK = "ok"
    NO_DATA = "no_data"
    ERROR = "error"
    UNKNOWN = "unknown"  # the enum default for a step status added after this reader's schema


class CapabilityMode(StrEnum):
    """Whether an agent answers requests for a capability or only listens to them."""

    HANDLE = "handle"
    SUBSCRIBE = "subscribe"


class AgentState(StrEnum):
    """Lifecycle state an instance reports in its heartbeat; only READY instances are routed to."""

    STARTING = "STARTING"
    READY = "READY"
    DRAINING = "DRAINING"
    OFFLINE = "OFFLINE"


class ControlKind(StrEnum):
    """What a control record overrides."""

    WEIGHTS = "WEIGHTS"
    INSTANCE = "INSTANCE"
    POLICY = "POLICY"
    CANARY = "CANARY"
    INTENT = "INTENT"  # an exact intent -> capability mapping (v4)
    INTENT_FEEDBACK = "INTENT_FEEDBACK"  # one tenant's learned confidence in an exact mapping (v6)
    UNKNOWN = "UNKNOWN"  # the enum default: a kind added after this reader's schema, skipped by the view


class InstanceAction(StrEnum):
    """An operator's override for one instance."""

    DRAIN = "DRAIN"
    DISABLE = "DISABLE"
    ENABLE = "ENABLE"
    UNKNOWN = "UNKNOWN"  # the enum default: an action added after this reader's schema, never applied


class AvroModel(BaseModel):
    """A frozen mirror of one Avro record type; fields, order and defaults follow its .avsc."""

    model_config = ConfigDict(frozen=True)

    avro_name: ClassVar[str]


class AvroRecord(AvroModel):
    """A top-level record with its own schema file, encodable by reach.kafka.codec."""

    def to_avro(self) -> dict[str, Any]:
        """The record as the plain dict fastavro writes (enums stay StrEnum, which is a str)."""
        return self.model_dump()

    @classmethod
    def from_avro(cls, data: Mapping[str, Any]) -> Self:
        """Build the model from a decoded dict; datetimes from logical-type readers become millis."""
        return cls.model_validate(data)


class RoutingHints(AvroModel):
    """Hints that steer the router's choice without naming an instance."""

    avro_name: ClassVar[str] = "RoutingHints"

    region: str | None = None
    session_key: str | None = None
    tags: list[str] = []
    priority: int = 0
    canary: bool = False


class Envelope(AvroRecord):
    """A request for a capability; the router reads everything but the payload."""

    avro_name: ClassVar[str] = "Envelope"

    message_id: str
    trace_id: str
    parent_id: str | None = None
    tenant: str
    source: str
    capability: str
    capability_version: str = "*"
    intent: str | None = None
    to_agent: str | None = None
    payload: bytes
    content_type: str = "application/json"
    schema_version: str | None = None
    routing: RoutingHints = Field(default_factory=RoutingHints)
    created_at: EpochMillis
    deadline: EpochMillis
    delivery_timeout_ms: int
    execution_timeout_ms: int = 0  # asked by the caller (v3); 0 = not set: the agent's declared timeout applies
    expire_at: EpochMillis | None = None
    attempt: int = 1
    max_attempts: int = 0
    generation: int = 0
    reroutes: int = 0
    excluded_instances: list[str] = []
    idempotency_key: str | None = None
    reply_to: str | None = None
    callback: str | None = None
    headers: dict[str, str] = {}
    session_snapshot: str | None = None
    max_tokens: int | None = None  # v4: tokens this request and its children may still spend (reach.core.allowance)
    max_cost_micros: int | None = None  # v4: cost (micro-units) this request and its children may still spend


class ErrorInfo(AvroModel):
    """What went wrong (Avro record Error): a failure class, a stable code and a human message."""

    avro_name: ClassVar[str] = "Error"

    kind: str
    code: str
    message: str


class CandidateScore(AvroModel):
    """One candidate's score and its parts, as the router computed them."""

    avro_name: ClassVar[str] = "CandidateScore"

    instance_id: str
    agent_id: str
    score: float
    fit: float
    locality: float
    load: float
    affinity: float
    parts: dict[str, float] = {}
    arm: str | None = None


class Decision(AvroModel):
    """Why the router picked an instance, and where it forwarded the envelope."""

    avro_name: ClassVar[str] = "Decision"

    candidates: list[CandidateScore] = []
    picked_instance: str | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    weights: dict[str, float] = {}
    arm: str | None = None
    admission: str | None = None


class ChannelDelivery(AvroModel):
    """Which channel carried a delivery step, with the provider's id for it (v5)."""

    avro_name: ClassVar[str] = "ChannelDelivery"

    channel: str
    provider_message_id: str | None = None
    callback_id: str | None = None


class IntentCandidate(AvroModel):
    """One capability the resolver considered for an intent, with its score and why it was not taken."""

    avro_name: ClassVar[str] = "IntentCandidate"

    capability: str
    score: float
    source: str
    reason: str | None = None


class IntentResolution(AvroModel):
    """How an intent was resolved (v6): the stage, the capability and the candidates considered."""

    avro_name: ClassVar[str] = "IntentResolution"

    stage: str
    intent: str
    capability: str | None = None
    candidates: list[IntentCandidate] = []
    by: str | None = None
    child_id: str | None = None


class Chunk(AvroModel):
    """One partial result of a handler (v7): text or one JSON document, appended to those before or replacing them."""

    avro_name: ClassVar[str] = "Chunk"

    seq: int
    kind: str  # "text" or "json"
    data: str
    append: bool = True


class Progress(AvroModel):
    """What a PROGRESS receipt reports (v7): the last progress fraction and note, and the chunks since the last one."""

    avro_name: ClassVar[str] = "Progress"

    fraction: float | None = None
    note: str | None = None
    chunks: list[Chunk] = []


class InputRequest(AvroModel):
    """A turn of a multi-turn message (v8): the question asked on INPUT_REQUIRED (with the answer's JSON Schema
    and where the asking turn's envelope sits); on the next turn's ACCEPTED receipt the question and its answer."""

    avro_name: ClassVar[str] = "InputRequest"

    question: str
    answer_schema: str = "{}"
    turn: int = 1
    answer: str | None = None
    origin_topic: str | None = None
    origin_partition: int | None = None
    origin_offset: int | None = None


class Usage(AvroModel):
    """What a handler's run cost (v9): tokens, model, cost in micro-units of `currency`, and whom it is charged to."""

    avro_name: ClassVar[str] = "Usage"

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cost_micros: int | None = None
    currency: str | None = None
    source: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class FanOutDelivery(AvroModel):
    """One delivery of a fan-out (v10): the subscribing agent, its message id, how it ended (None: not yet)."""

    avro_name: ClassVar[str] = "FanOutDelivery"

    agent_id: str
    message_id: str
    status: Status | None = None


class FanOut(AvroModel):
    """The deliveries a FANNED_OUT receipt names (v10, reach.core.fanout)."""

    avro_name: ClassVar[str] = "FanOut"

    deliveries: list[FanOutDelivery] = []


class Receipt(AvroRecord):
    """One step in the life of a message."""

    avro_name: ClassVar[str] = "Receipt"

    message_id: str
    generation: int = 0
    trace_id: str
    tenant: str
    capability: str
    agent_id: str | None = None
    instance_id: str | None = None
    status: Status
    attempt: int = 1
    at: EpochMillis
    error: ErrorInfo | None = None
    retry_after_ms: int | None = None
    result: bytes | None = None
    step_status: StepStatus | None = None
    timings: dict[str, int] = {}
    decision: Decision | None = None
    cost: float | None = None
    due_at: EpochMillis | None = None
    deadline: EpochMillis | None = None
    delivery_timeout_ms: int | None = None
    reroutes: int = 0
    reused_from: str | None = None
    channel: ChannelDelivery | None = None
    callback: str | None = None
    resolution: IntentResolution | None = None
    progress: Progress | None = None
    input: InputRequest | None = None
    usage: Usage | None = None  # v9: on the terminal receipt of a handler's run (reach.core.usage)
    fanout: FanOut | None = None  # v10: on FANNED_OUT, the deliveries of a fan-out (reach.core.fanout)


class Capability(AvroModel):
    """A capability an agent serves, with its version and JSON Schema contract."""

    avro_name: ClassVar[str] = "Capability"

    name: str
    version: str
    input_schema: str = "{}"
    output_schema: str = "{}"
    mode: CapabilityMode = CapabilityMode.HANDLE
    tags: list[str] = []
    examples: list[str] = []
    idempotent: bool = False  # may run twice for one request: content-hash keys, retried after a timeout (v6)
    filter: str | None = None  # a subscriber's filter, mode subscribe: which events it is notified of (v6)


class AgentRegistration(AvroRecord):
    """The heartbeat of one agent instance in the registry."""

    avro_name: ClassVar[str] = "AgentRegistration"

    agent_id: str
    instance_id: str
    build_version: str
    capabilities: list[Capability] = []
    tenants: list[str] = []
    region: str | None = None
    weight: float = 1.0
    max_concurrency: int = 1
    max_queue: int = 0
    qps_limit: float | None = None
    cost: float | None = None
    state: AgentState
    heartbeat_at: EpochMillis
    ttl_ms: int
    inflight: int = 0
    assigned_partitions: list[int] = []
    inbox_topic: str
    priority_class: int = 0
    execution_timeout_ms: int = 0  # declared by the agent (v4); 0 = not declared
    owner: str | None = None  # who answers for the agent: a channel target (v5)
    depends_on: list[str] = []  # capabilities its handlers call, `name` or `name@range` (v5)


class LoadReport(AvroRecord):
    """What one instance runs (occupancy) and holds (its SDK backlog) now, on `<ns>.loads`."""

    avro_name: ClassVar[str] = "LoadReport"

    instance_id: str
    agent_id: str
    at: EpochMillis
    inflight: int
    queued: int = 0
    capacity: int
    max_queue: int
    drain_rate: float | None = None


class DeadLetter(AvroRecord):
    """A message Reach gave up on, with the original bytes and where they came from."""

    avro_name: ClassVar[str] = "DeadLetter"

    envelope: bytes
    reason: str
    error: ErrorInfo | None = None
    attempts: int = 0
    generation: int = 0
    message_id: str | None = None
    capability: str | None = None
    agent_id: str | None = None
    first_failure_at: EpochMillis
    last_failure_at: EpochMillis
    origin_topic: str
    origin_partition: int
    origin_offset: int


class Weights(AvroModel):
    """Scoring weights; the defaults are the design's 0.4 / 0.2 / 0.3 / 0.1."""

    avro_name: ClassVar[str] = "Weights"

    fit: float = 0.4
    locality: float = 0.2
    load: float = 0.3
    affinity: float = 0.1
    factors: dict[str, float] = {}


class InstanceOverride(AvroModel):
    """Drain, disable or re-enable one instance."""

    avro_name: ClassVar[str] = "InstanceOverride"

    instance_id: str
    action: InstanceAction


class Policy(AvroModel):
    """Retry and timeout policy for a scope; None inherits the next wider scope's value."""

    avro_name: ClassVar[str] = "Policy"

    max_attempts: int | None = None
    backoff_base_ms: int | None = None
    backoff_max_ms: int | None = None
    delivery_timeout_ms: int | None = None
    execution_timeout_ms: int | None = None
    budget_ms: int | None = None
    validate_at_router: bool = False
    idempotency_window_ms: int | None = None
    slow_threshold_ms: int | None = None
    handoff: bool = False  # v5: no route -> a human on <ns>.handoff instead of UNROUTABLE / DEAD_LETTERED
    fallback: str | None = None  # v7: the capability that serves a request of this scope that ended badly
    dead_after_ms: int | None = None  # v8: a dead letter nobody redrove this long is DEAD (its owner is told)


class CanaryState(StrEnum):
    """Where a canary stands (Avro enum CanaryState)."""

    RUNNING = "RUNNING"
    PROMOTED = "PROMOTED"
    ROLLED_BACK = "ROLLED_BACK"
    UNKNOWN = "UNKNOWN"  # the enum default: a state added after this reader's schema


class Canary(AvroModel):
    """A canary of one agent's new build version, keyed `CANARY:<agent_id>` on the control topic."""

    avro_name: ClassVar[str] = "Canary"

    agent_id: str
    version: str
    steps: list[int] = [5, 20, 50, 100]
    step: int = 0
    step_ms: int = 60000
    min_success: float = 0.95
    state: CanaryState = CanaryState.RUNNING
    started_at: EpochMillis
    step_started_at: EpochMillis
    reason: str | None = None


class IntentMapping(AvroModel):
    """An exact intent -> capability mapping on the control topic, keyed INTENT:<phrase> (v4); a tenant's learned
    confidence in it, keyed INTENT_FEEDBACK:<tenant>:<phrase> (v6)."""

    avro_name: ClassVar[str] = "IntentMapping"

    phrase: str
    capability: str
    confidence: float = 1.0
    source: str = "operator"
    tenant: str | None = None


_BODY_OF_KIND = {
    ControlKind.WEIGHTS: "weights",
    ControlKind.INSTANCE: "instance",
    ControlKind.POLICY: "policy",
    ControlKind.CANARY: "canary",
    ControlKind.INTENT: "intent",
    ControlKind.INTENT_FEEDBACK: "intent",
}


class Control(AvroRecord):
    """An operator override, keyed `<kind>:<scope>` on the control topic."""

    avro_name: ClassVar[str] = "Control"

    kind: ControlKind
    scope: str = "*"
    weights: Weights | None = None
    instance: InstanceOverride | None = None
    policy: Policy | None = None
    canary: Canary | None = None
    intent: IntentMapping | None = None
    updated_at: EpochMillis
    updated_by: str

    @model_validator(mode="after")
    def _body_matches_kind(self) -> Self:
        field = _BODY_OF_KIND.get(self.kind)  # an UNKNOWN kind's body is in a field this reader lacks
        if field is not None and getattr(self, field) is None:
            raise ValueError(f"a {self.kind} control record needs its `{field}` field; got None")
        return self

    @property
    def understood(self) -> bool:
        """False for a kind or instance action added after this reader's schema: skip the record, keep the
        key's previous one (applying it would drop an override this reader cannot see replaced)."""
        if self.kind is ControlKind.UNKNOWN:
            return False
        return self.instance is None or self.instance.action is not InstanceAction.UNKNOWN

    @property
    def key(self) -> str:
        """The record key on the control topic."""
        return f"{self.kind}:{self.scope}"


class BreakerState(StrEnum):
    """A circuit breaker's state (Avro enum BreakerState); instances and channels share it."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"
    UNKNOWN = "UNKNOWN"  # the enum default: a state added after this reader's schema; routers treat it as CLOSED


class InstanceHealth(AvroRecord):
    """One instance's health and breaker state on `<ns>.health`, keyed by instance_id (one writer per partition)."""

    avro_name: ClassVar[str] = "InstanceHealth"

    instance_id: str
    agent_id: str
    build_version: str = ""
    at: EpochMillis
    breaker: BreakerState = BreakerState.CLOSED
    open_until: EpochMillis | None = None
    admit: float = 1.0
    weight: float = 1.0
    timeout_factor: float = 1.0
    reason: str | None = None
    calls_1m: int = 0
    success_1m: float | None = None
    calls_5m: int = 0
    success_5m: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    slow_ratio: float | None = None
    overloads_10s: int = 0
    consecutive_failures: int = 0
    probe_successes: int = 0
    restore_step: int | None = None
    step_started_at: EpochMillis | None = None
    ejected_until: EpochMillis | None = None
    slow_until: EpochMillis | None = None
    rules_since: EpochMillis | None = None


class AppKey(AvroModel):
    """One signing key of a gateway app; its secret is sealed (reach.secretbox), live until revoked."""

    avro_name: ClassVar[str] = "AppKey"

    key_id: str
    sealed_secret: bytes
    created_at: EpochMillis
    revoked_at: EpochMillis | None = None

    @property
    def live(self) -> bool:
        return self.revoked_at is None


class SpendLimit(AvroModel):
    """One spend limit of an app (App v3): at most `amount` of `kind` (tokens | cost) per `period` (day | month)."""

    avro_name: ClassVar[str] = "SpendLimit"

    kind: str
    amount: int
    period: str


class App(AvroRecord):
    """A calling application of the ingress gateway, keyed by app_id on the compacted apps topic."""

    avro_name: ClassVar[str] = "App"

    app_id: str
    name: str
    tenant: str
    capabilities: list[str] = []
    rate: float
    burst: int
    keys: list[AppKey] = []
    revoked_at: EpochMillis | None = None
    created_at: EpochMillis
    updated_at: EpochMillis
    updated_by: str
    role: str | None = None  # v2: None a calling app; "viewer" / "admin" a console operator (reach.console)
    limits: list[SpendLimit] = []  # v3: token and cost limits per day or month (reach.core.spend)
    owner: str | None = None  # v4: who answers for the app's requests, a channel target (dead letters, stale NO_ROUTE)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def live_keys(self) -> list[AppKey]:
        """The keys that sign requests now: none once the app is revoked."""
        return [] if self.revoked else [k for k in self.keys if k.live]


class AuditKind(StrEnum):
    """What an audit event records (Avro enum AuditKind)."""

    JOIN = "JOIN"
    LEAVE = "LEAVE"
    VERSION = "VERSION"
    CAPABILITIES = "CAPABILITIES"
    STATE = "STATE"
    REGISTRATION = "REGISTRATION"
    EJECTED = "EJECTED"
    RESTORED = "RESTORED"
    WEIGHTS = "WEIGHTS"
    INSTANCE = "INSTANCE"
    POLICY = "POLICY"
    CANARY = "CANARY"
    INTENT = "INTENT"
    APP = "APP"
    OPERATOR = "OPERATOR"
    UNKNOWN = "UNKNOWN"  # the enum default: a kind added after this reader's schema
    EVICTED = "EVICTED"  # no heartbeat for more than 2 x ttl: the registry reads the instance as OFFLINE (v2)
    REDRIVE = "REDRIVE"  # a dead letter replayed by an operator (v3)
    HANDOFF = "HANDOFF"  # a handoff taken, answered or re-routed by a person (v3)
    CANCEL = "CANCEL"  # an operator's cancel of a message (v3)


class AuditEvent(AvroRecord):
    """One change of the registry or control plane on `<ns>.audit` (not compacted), keyed by subject."""

    avro_name: ClassVar[str] = "AuditEvent"

    at: EpochMillis
    kind: AuditKind
    subject: str
    agent_id: str | None = None
    instance_id: str | None = None
    actor: str
    before: str | None = None
    after: str | None = None
    source: str = ""
