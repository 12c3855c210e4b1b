"""The Agent object: identity, capabilities (a decorator), lifecycle hooks and `run()`."""

from __future__ import annotations

import inspect
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from jsonschema.protocols import Validator

from reach.agent.contract import Schema, compile_schema
from reach.agent.exceptions import InvalidCost, InvalidDeclaration
from reach.agent.middleware import Middleware
from reach.agent.recentruns import DEFAULT_MAX_RUNS
from reach.agent.startgate import DEFAULT_GRACE_MS
from reach.core.allowance import inherit
from reach.core.loads import default_max_queue
from reach.core.progress import Coalescer
from reach.core.retention import RESULT_TTL_S
from reach.core.timeouts import (
    DEFAULT_EXECUTION_TIMEOUT_MS,
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    BadTimeout,
    check_timeout_ms,
)
from reach.core.turns import Turn, conversation, dropped_turns
from reach.core.usage import Meter, check_report, from_result
from reach.core.versions import parse_version, satisfies
from reach.envelopes import DELIVERY_TIMEOUT_MS, new_id
from reach.errors import ReachError
from reach.lineage import Run
from reach.names import check_agent_id, check_capability
from reach.records import AgentRegistration, AgentState, Capability, CapabilityMode, Envelope, Usage

if TYPE_CHECKING:
    from reach.agent.streaming import ProgressStream

Handler = Callable[..., Any]
Hook = Callable[[], Any]
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TTL_MS = 45_000
log = logging.getLogger("reach.agent")


@dataclass
class Context:
    """What a handler may want besides its payload: the envelope and who is running it; the handler may set
    `ctx.cost` (a finite number >= 0, e.g. the call's price), which its outcome receipt carries."""

    envelope: Envelope
    agent_id: str
    instance_id: str
    _cost: float | None = field(default=None, repr=False)
    _cancelled: Callable[[], bool] = field(default=lambda: False, repr=False)
    _heartbeat: Callable[[], None] = field(default=lambda: None, repr=False)
    _progress: ProgressStream | None = field(default=None, repr=False)
    _meter: Meter = field(default_factory=Meter, repr=False)
    _run: Run | None = field(default=None, repr=False)
    _returned_usage: bool = field(default=True, repr=False)

    async def progress(self, fraction: float | None, note: str | None = None) -> None:
        """Report how far the handler is: `fraction` in [0, 1] (or None), an optional short note. Coalesced
        into PROGRESS receipts (at most one per 100 ms); a fraction outside [0, 1] raises BadProgress."""
        if self._progress is None:
            Coalescer().progress(fraction, note)  # outside the SDK (a handler's unit test): checked, not sent
            return
        await self._progress.progress(fraction, note)

    async def emit(self, chunk: Any, *, append: bool = True) -> None:
        """Stream a partial result: text (str) or one JSON-serialisable value; `append=False` replaces the chunks
        before it. Coalesced into PROGRESS receipts; a chunk over 32 KiB or not JSON raises BadProgress. It waits
        (back-pressure) when 256 KiB are pending; the outcome receipt still carries the whole result."""
        if self._progress is None:
            Coalescer().emit(chunk, append=append)
            return
        await self._progress.emit(chunk, append=append)

    def usage(self, *, input_tokens: int | None = None, output_tokens: int | None = None, model: str | None = None,
              cost: int | None = None) -> None:
        """Report what this run cost: tokens read and written, the model, and the cost in micro-units of the
        deployment's currency (REACH_CURRENCY; 1.25 USD is 1_250_000). Reports add up (one per LLM call is fine);
        the terminal receipt carries the sum. A value that is not a whole number >= 0, or an absurd one, is
        dropped with a warning: usage never fails the request."""
        report = check_report(input_tokens=input_tokens, output_tokens=output_tokens, model=model, cost=cost)
        for problem in report.problems:
            log.warning("ctx.usage for %s: %s", self.envelope.message_id, problem)
        self._meter.add(report)

    def ignore_returned_usage(self) -> None:
        """Charge only what this run reports with ctx.usage: a `usage` object in the returned value is left in the
        result, unread. The product's bridges call it: their result is a remote peer's, and a peer's claim
        (`{"usage": {"cost": 1e12}}`) is no charge of the caller's (decision 0060)."""
        self._returned_usage = False

    def _returned(self, value: Any) -> None:
        """The usage a handler returned (a `usage` object in its result, reach.core.usage.from_result), unless it
        reported some with ctx.usage (then that stands) or said it returns a peer's result (ignore_returned_usage)."""
        if self._meter.reported or not self._returned_usage:
            return
        report = from_result(value)
        if report is None:
            return
        for problem in report.problems:
            log.warning("usage returned for %s: %s", self.envelope.message_id, problem)
        self._meter.add(report)

    def _lineage(self) -> Run:
        """This run as the client SDK sees it from inside the handler (reach.lineage): its children inherit from it."""
        if self._run is None:
            self._run = Run(self.envelope, self._meter)
        return self._run

    @property
    def budget_left(self) -> dict[str, int]:
        """What a child sent now inherits of this message's budget: `max_tokens` / `max_cost_micros` left after this
        run's reports, its ended children's usage and what its children in flight hold ({} when the message carries no
        budget)."""
        parent = {"max_tokens": self.envelope.max_tokens, "max_cost_micros": self.envelope.max_cost_micros}
        return inherit(parent, self._lineage().committed(), {})

    def _usage(self, currency: str | None) -> Usage | None:
        """What the run reported, as the receipt's record (charged to the envelope's source), or None."""
        return self._meter.usage(currency=currency, source=self.envelope.source)

    @property
    def attempt(self) -> int:
        return self.envelope.attempt

    @property
    def cancelled(self) -> bool:
        """True once the caller cancelled this message (reach.cancels): stop, and raise `Canceled` to end it
        CANCELED, or return what is done so far."""
        return self._cancelled()

    def heartbeat(self) -> None:
        """Tell Reach this run is alive: its deadline moves to now + the agent's heartbeat_timeout_ms (also past its
        execution timeout, never past the POLICY cap or the message's deadline). Once a handler has beaten, going
        quiet for longer than that times it out. Safe from sync handlers' threads. Raises LeaseLost when the run no
        longer holds its message (its lease went to another run, or it already timed out): stop then."""
        self._heartbeat()

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The conversation so far of a multi-turn message (oldest first): each turn's `question`, `schema` and the
        caller's `answer`; () on the first turn. At most 16 turns and 64 KiB (`turns_dropped` counts older ones)."""
        return conversation(self.envelope.headers)

    @property
    def answer(self) -> Any:
        """The caller's answer to the last question this message asked (None on a first turn)."""
        turns = self.turns
        return turns[-1].answer if turns else None

    @property
    def turns_dropped(self) -> int:
        return dropped_turns(self.envelope.headers)

    @property
    def session_snapshot(self) -> str | None:
        """The request's read-only session snapshot reference (a compacted-topic key or object URI), if any."""
        return self.envelope.session_snapshot

    @property
    def cost(self) -> float | None:
        return self._cost

    @cost.setter
    def cost(self, value: float | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise InvalidCost(f"ctx.cost must be a finite number >= 0 (or None); got {value!r}.")
        self._cost = None if value is None else float(value)


MAX_RANGES_KEPT = 256


@dataclass(frozen=True)
class CapabilitySpec:
    """One declared capability: its public record, compiled validators and the handler."""

    record: Capability
    handler: Handler
    input_validator: Validator
    output_validator: Validator
    wants_context: bool
    is_async: bool = field(default=False)
    # whether the version fits each range envelopes asked for (Agent.match), filled as they come
    fits: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)


def _owner(owner: str | None) -> str | None:
    """The owner as declared, checked: a channel target such as `email:ops@example.com` (reach/channels/spec.py)."""
    if owner is None:
        return None
    from reach.channels.errors import BadCallback
    from reach.channels.spec import parse

    try:
        parse(owner)
    except BadCallback as exc:
        raise InvalidDeclaration(f"owner {owner[:200]!r} is not a channel target ({exc}); e.g. owner="
                                 "'email:ops@example.com' or owner='webhook:https://hooks.example.com/x'.") from None
    return owner


def _dependencies(entries: list[str]) -> list[str]:
    """`depends_on` as declared, each entry checked (`name` or `name@range`)."""
    from reach.core.declarations import parse_dependency

    for entry in entries:
        try:
            parse_dependency(entry)
        except ReachError as exc:
            raise InvalidDeclaration(f"depends_on entry {entry[:200]!r}: {exc}") from None
    return list(dict.fromkeys(entries))


def _wants_context(fn: Handler) -> bool:
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not 1 <= len(params) <= 2:
        raise InvalidDeclaration(f"handler {fn.__qualname__} must take (payload) or (payload, ctx); "
                                 f"it takes {len(params)} positional parameters.")
    return len(params) == 2


class Agent:
    """An agent: declare capabilities with `@agent.capability(...)`, then `agent.run()`."""

    def __init__(
        self,
        agent_id: str,
        *,
        region: str | None = None,
        max_concurrency: int = 8,
        max_queue: int | None = None,
        ttl_ms: int = DEFAULT_TTL_MS,
        build_version: str = "dev",
        tenants: list[str] | None = None,
        weight: float = 1.0,
        qps_limit: float | None = None,
        cost: float | None = None,
        priority_class: int = 0,
        execution_timeout_ms: int = DEFAULT_EXECUTION_TIMEOUT_MS,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS,
        lease_margin_ms: int = 5_000,
        result_ttl_s: int = RESULT_TTL_S,
        recent_runs: int = DEFAULT_MAX_RUNS,
        started_grace_ms: int = DEFAULT_GRACE_MS,
        drain_grace_s: float = 30.0,
        consumer_config: dict[str, Any] | None = None,
        instance_id: str | None = None,
        metrics_port: int | None = None,
        middleware: list[Middleware] | None = None,
        owner: str | None = None,
        depends_on: list[str] | None = None,
    ) -> None:
        self.agent_id = check_agent_id(agent_id)
        if max_concurrency < 1:
            raise InvalidDeclaration(f"max_concurrency must be >= 1, got {max_concurrency}.")
        if max_queue is not None and max_queue < 0:
            raise InvalidDeclaration(f"max_queue must be >= 0 (or None for the default), got {max_queue}.")
        if ttl_ms < 300:
            raise InvalidDeclaration(f"ttl_ms must be >= 300 (heartbeats go every ttl/3), got {ttl_ms}.")
        self.region = region
        self.max_concurrency = max_concurrency
        # None: min(4 x max_concurrency, delivery timeout x measured drain rate), see reach.core.loads
        self.max_queue = max_queue
        self.ttl_ms = ttl_ms
        self.build_version = build_version
        self.tenants = list(tenants or [])
        self.weight = weight
        self.qps_limit = qps_limit
        self.cost = cost
        self.priority_class = priority_class  # the request priority this instance is kept for (priority factor)
        # who answers for it (a channel target) and what its handlers call: in the registration (v5)
        self.owner = _owner(owner)
        self.depends_on = _dependencies(depends_on or [])
        # declared in the registration; callers may ask for less, the POLICY caps both (reach.core.timeouts)
        self.execution_timeout_ms = _declared(execution_timeout_ms, "execution_timeout_ms")
        # a handler that calls ctx.heartbeat() must call it again within this long, else it is timed out
        self.heartbeat_timeout_ms = _declared(heartbeat_timeout_ms, "heartbeat_timeout_ms")
        self.lease_margin_ms = lease_margin_ms
        self.result_ttl_s = result_ttl_s
        if recent_runs < 0:
            raise InvalidDeclaration(f"recent_runs must be >= 0 (0 keeps no record of runs), got {recent_runs}.")
        # runs this instance remembers (reach.agent.recentruns): a redelivery of one never reruns it, Redis or not
        self.recent_runs = recent_runs
        if started_grace_ms < 0:
            raise InvalidDeclaration(f"started_grace_ms must be >= 0 (0 sends STARTED as each run starts), got "
                                     f"{started_grace_ms}.")
        # a run that ends within this long sends no STARTED: its terminal receipt carries the start (startgate)
        self.started_grace_ms = started_grace_ms
        self.drain_grace_s = drain_grace_s
        self.consumer_config = dict(consumer_config or {})
        self.middleware: list[Middleware] = list(middleware or [])  # runs after the built-in retries and metrics
        # opt-in Prometheus endpoint; REACH_AGENT_METRICS_PORT turns it on without touching the code
        env_port = os.environ.get("REACH_AGENT_METRICS_PORT")
        self.metrics_port = metrics_port if metrics_port is not None else (int(env_port) if env_port else None)
        self.instance_id = instance_id or f"{socket.gethostname()}-{os.getpid()}-{new_id()[-8:].lower()}"
        self.capabilities: dict[str, CapabilitySpec] = {}
        self.start_hooks: list[Hook] = []
        self.stop_hooks: list[Hook] = []
        self._runner: Any = None

    def capability(
        self,
        name: str,
        *,
        version: str,
        input_schema: Schema = None,
        output_schema: Schema = None,
        tags: list[str] | None = None,
        examples: list[Any] | None = None,
        mode: CapabilityMode = CapabilityMode.HANDLE,
        idempotent: bool = False,
    ) -> Callable[[F], F]:
        """Declare that the decorated handler serves capability `name` at semver `version`; `idempotent=True`
        says it may run twice for one request with no harm (content-hash keys, a timed-out attempt retried)."""
        check_capability(name)
        parse_version(version)
        if name in self.capabilities:
            raise InvalidDeclaration(f"capability {name!r} is declared twice on {self.agent_id}.")
        where = f"{self.agent_id} capability {name}@{version}"
        in_text, in_validator = compile_schema(input_schema, f"{where} input_schema")
        out_text, out_validator = compile_schema(output_schema, f"{where} output_schema")

        def decorate(fn: F) -> F:
            record = Capability(
                name=name, version=version, input_schema=in_text, output_schema=out_text, mode=mode,
                tags=list(tags or []),
                examples=[e if isinstance(e, str) else _json(e) for e in (examples or [])],
                idempotent=idempotent,
            )
            self.capabilities[name] = CapabilitySpec(
                record=record, handler=fn, input_validator=in_validator, output_validator=out_validator,
                wants_context=_wants_context(fn), is_async=inspect.iscoroutinefunction(fn),
            )
            return fn

        return decorate

    def on_start(self, fn: F) -> F:
        """Run `fn` (sync or async) before the instance turns READY."""
        self.start_hooks.append(fn)
        return fn

    def on_stop(self, fn: F) -> F:
        """Run `fn` after in-flight work drained, before the tombstone."""
        self.stop_hooks.append(fn)
        return fn

    def validate(self) -> None:
        """Refuse to start an agent that serves nothing."""
        if not self.capabilities:
            raise InvalidDeclaration(f"{self.agent_id} declares no capability; add @agent.capability(...).")

    def match(self, envelope: Envelope) -> CapabilitySpec | None:
        """The capability this instance serves for the envelope (name and version range), if any."""
        spec = self.capabilities.get(envelope.capability)
        if spec is None:
            return None
        asked = envelope.capability_version or "*"
        fits = spec.fits.get(asked)  # a semver parse per message was ~4% of the SDK's time per message
        if fits is None:
            fits = satisfies(spec.record.version, asked)
            if len(spec.fits) >= MAX_RANGES_KEPT:  # ranges come from envelopes: keep a bounded few
                spec.fits.clear()
            spec.fits[asked] = fits
        return spec if fits else None

    def registration(self, *, state: AgentState, heartbeat_at: int, inbox_topic: str, inflight: int,
                     assigned_partitions: list[int]) -> AgentRegistration:
        """This instance's registry record at a moment."""
        return AgentRegistration(
            agent_id=self.agent_id, instance_id=self.instance_id, build_version=self.build_version,
            capabilities=[c.record for c in self.capabilities.values()], tenants=self.tenants,
            region=self.region, weight=self.weight, max_concurrency=self.max_concurrency,
            max_queue=self.queue_bound(None, DELIVERY_TIMEOUT_MS),
            qps_limit=self.qps_limit, cost=self.cost, state=state, heartbeat_at=heartbeat_at,
            ttl_ms=self.ttl_ms, inflight=inflight, assigned_partitions=sorted(assigned_partitions),
            inbox_topic=inbox_topic, priority_class=self.priority_class,
            execution_timeout_ms=self.execution_timeout_ms, owner=self.owner, depends_on=list(self.depends_on),
        )

    def queue_bound(self, drain_rate: float | None, delivery_timeout_ms: int) -> int:
        """The queue bound in force: max_queue when given, else the default from the drain rate."""
        if self.max_queue is not None:
            return self.max_queue
        return default_max_queue(self.max_concurrency, drain_rate, delivery_timeout_ms)

    def run(self, *, install_signals: bool = True) -> None:
        """Run this instance until SIGTERM/SIGINT or `stop()`: register, consume, drain, tombstone."""
        from reach import traceexport
        from reach.agent.runner import Runner
        from reach.kafka import codec, writeas
        from reach.settings import KafkaSettings, ReachSettings, RedisSettings

        self.validate()
        # an agent's entry point: its settings come from the environment here, and only here
        settings = ReachSettings()
        codec.use_schema_registry(settings.schema_registry_url)
        writeas.use(settings.records_write_as)
        traceexport.configure("reach-agent", os.environ)  # when OTEL_* asks, and the application installed no SDK
        self._runner = Runner(self, kafka=KafkaSettings(), redis=RedisSettings(), settings=settings)
        self._runner.run(install_signals=install_signals)

    def stop(self) -> None:
        """Ask a running instance to drain and leave (thread-safe)."""
        if self._runner is not None:
            self._runner.stop()


def _declared(value: int, what: str) -> int:
    """A declared timeout, or InvalidDeclaration (the instance never registers with a negative or absurd one)."""
    try:
        return check_timeout_ms(value, what=what)
    except BadTimeout as exc:
        raise InvalidDeclaration(str(exc)) from None


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


async def call_hook(hook: Hook) -> None:
    """Run a sync or async lifecycle hook."""
    result = hook()
    if isinstance(result, Awaitable):
        await result
