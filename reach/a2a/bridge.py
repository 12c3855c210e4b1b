"""`reach a2a bridge`: an Agent-Reach agent whose one capability is an external A2A server.

The instance consumes its inbox like any agent (routing, retries, breakers, receipts); each message is
sent to the remote agent with the official SDK client, the task is followed until it ends, and its
outcome (reach.a2a.outcome) becomes the receipt. A cancel of the message cancels the remote task.

| variable | default | meaning |
|---|---|---|
| REACH_A2A_BEARER | (none) | `Authorization: Bearer` token for the remote agent, sent only to the origin of `--url` |
| REACH_A2A_BEARER_ORIGINS | (none) | more origins the bearer may go to, comma-separated (`https://a2a.example.com`): |
| | | for a card whose interface URL is on another host than the card |
| REACH_A2A_ALLOW_PRIVATE | false | let the card's interface URL, on an origin other than those above, be a |
| | | non-public address (the channels' SSRF guard, reach/channels/guard.py, refuses it otherwise) |
| REACH_A2A_TIMEOUT | 30 (seconds) | one HTTP call to the remote agent |
| REACH_A2A_POLL | 0.5 (seconds) | how often a task not final yet is read again (GetTask) |
| REACH_A2A_TURN_KEY | (from the bearer, else per process) | seals the remote task a question names; the same on |
| | | every instance of one bridge, so that any of them takes a next turn (docs/a2a.md) |

A remote task that asks (input-required, auth-required) asks the caller (NeedsInput, NeedsAuth); the answer's turn
goes to that task (reach.a2a.outcome.Seal).

What the remote agent sends back (its card, each answer) is read up to PEER_ANSWER_BYTES (reach/bodylimit.py): a
bigger one is FAILED `A2A_ANSWER_TOO_LARGE`. A request to an origin other than `--url`'s and REACH_A2A_BEARER_ORIGINS
(a card names its own interface URL) goes only to a public address, checked and pinned by the channels' guard:
else it is FAILED `A2A_FORBIDDEN_TARGET` (decision 0060).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import httpx
from a2a.client import A2ACardResolver, A2AClientError, A2AClientTimeoutError, Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import AgentCard, CancelTaskRequest, GetTaskRequest, Message, Role, SendMessageRequest, Task
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotFoundError
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.a2a import hints, outcome
from reach.agent import Agent, BusinessError, Canceled, Reject, TransientError
from reach.agent.agent import Context
from reach.bodylimit import PEER_ANSWER_BYTES, AnswerTooLarge, bound
from reach.channels import guard
from reach.channels.provider import Failure
from reach.errors import InfraUnavailable

_CLIENT_ERRORS = ("HTTP Error 400", "HTTP Error 401", "HTTP Error 403", "HTTP Error 404")


class BridgeSettings(BaseSettings):
    """How the bridge talks to the remote agent."""

    model_config = SettingsConfigDict(env_prefix="REACH_A2A_", frozen=True, extra="ignore")

    bearer: SecretStr | None = None
    bearer_origins: str = ""
    timeout: float = Field(default=30.0, gt=0)
    poll: float = Field(default=0.5, gt=0)
    allow_private: bool = False  # the card's interface URL on another origin may be a non-public address
    turn_key: SecretStr | None = None  # seals the remote task a question names (reach.a2a.outcome.Seal)

    def seal_key(self) -> bytes:
        """REACH_A2A_TURN_KEY; else one derived from the bearer; else this process's own (a next turn then needs
        this instance: set the key on every instance of a bridge so that any of them can take it)."""
        if self.turn_key is not None:
            return self.turn_key.get_secret_value().encode()
        if self.bearer is not None:
            return hashlib.sha256(b"reach-a2a-turns\n" + self.bearer.get_secret_value().encode()).digest()
        return _PROCESS_KEY


_PROCESS_KEY = os.urandom(32)


class RemoteUnreachable(InfraUnavailable):
    """The remote A2A agent's card could not be read (`reach a2a bridge` exits 4)."""


def origin_of(url: str | httpx.URL) -> str:
    """`scheme://host:port`, lower-cased, with the scheme's default port made explicit."""
    parsed = httpx.URL(str(url))
    port = parsed.port or {"http": 80, "https": 443}.get(parsed.scheme, 0)
    return f"{parsed.scheme}://{parsed.host.lower()}:{port}"


def bearer_origins(url: str, settings: BridgeSettings) -> frozenset[str]:
    """Where the bearer may go: the origin the card was read from, and the configured allow-list. A card names
    its own interface URL, so without this the token would follow whatever host a card names (issue 28, #12)."""
    extra = [o.strip() for o in settings.bearer_origins.split(",") if o.strip()]
    return frozenset(origin_of(o) for o in [url, *extra])


class ForbiddenTarget(httpx.ConnectError):
    """The card sends the bridge to a non-public address on an origin the operator did not name."""


class GuardedTransport(httpx.AsyncBaseTransport):
    """Requests to the trusted origins (`--url`'s and the bearer allow-list) go as they are; any other goes only to
    a public address, resolved once and pinned (the channels' SSRF guard), unless private targets are allowed."""

    def __init__(self, trusted: frozenset[str], *, allow_private: bool, inner: httpx.AsyncBaseTransport | None = None,
                 resolver: guard.Resolver = guard.resolve) -> None:
        self._trusted = trusted
        self._allow_private = allow_private
        self._inner = inner or httpx.AsyncHTTPTransport()
        self._resolve = resolver

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if origin_of(request.url) not in self._trusted:
            url = str(request.url)
            checked = await guard.checked_target(url, resolver=self._resolve, allow_private=self._allow_private,
                                                 channel="a2a bridge")
            if isinstance(checked, Failure):
                raise ForbiddenTarget(checked.reason.replace("REACH_CHANNEL_WEBHOOK_ALLOW_PRIVATE",
                                                             "REACH_A2A_ALLOW_PRIVATE"), request=request)
            if checked is not None:
                pinned, extensions = guard.pinned(url, checked)
                request.url = httpx.URL(pinned)  # the Host header keeps the card's host name
                request.extensions.update(extensions)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class OriginBearer(httpx.Auth):
    """`Authorization: Bearer` on requests to the allowed origins only; other requests go without it."""

    def __init__(self, token: str, origins: frozenset[str]) -> None:
        self._header = f"Bearer {token}"
        self._origins = origins

    def auth_flow(self, request: httpx.Request) -> Any:
        if origin_of(request.url) in self._origins:
            request.headers["Authorization"] = self._header
        yield request


def http_client(url: str, settings: BridgeSettings, transport: httpx.AsyncBaseTransport | None = None,
                resolver: guard.Resolver = guard.resolve) -> httpx.AsyncClient:
    """The bridge's HTTP client for the remote agent read at `url` (`transport`: a test's in-memory one, under the
    guard), its answers read up to PEER_ANSWER_BYTES."""
    origins = bearer_origins(url, settings)
    auth = OriginBearer(settings.bearer.get_secret_value(), origins) if settings.bearer else None
    guarded = GuardedTransport(origins, allow_private=settings.allow_private, inner=transport, resolver=resolver)
    return bound(httpx.AsyncClient(timeout=settings.timeout, auth=auth, follow_redirects=False, transport=guarded),
                 PEER_ANSWER_BYTES, f"the remote A2A agent {origin_of(url)}")


async def read_card(url: str, settings: BridgeSettings) -> AgentCard:
    async with http_client(url, settings) as http:
        try:
            return await A2ACardResolver(http, url).get_agent_card()
        except A2AError as exc:
            raise RemoteUnreachable(f"cannot read the agent card of {url} ({exc}): expected an A2A server with "
                                    f"{url.rstrip('/')}/.well-known/agent-card.json; check --url") from None


async def call(client: Client, payload: Any, ctx: Context, poll_s: float, seal: outcome.Seal | None = None) -> Any:
    """Send, follow the task until it ends or asks (cancelling it when the message is cancelled), return its
    result or its question (NeedsInput / NeedsAuth, the task sealed by `seal`); a next turn sends the caller's answer
    to the task that asked, in its context. A retried answer turn first reads that task: when it no longer waits on
    that question (it works, ended, or asks another), an earlier attempt's answer reached it, and it is followed
    instead of answered twice."""
    env = ctx.envelope
    asked = seal.opened(ctx.turns) if seal is not None else None
    if asked is None:
        message = Message(message_id=f"{env.message_id}-{env.generation}-{env.attempt}", role=Role.ROLE_USER,
                          context_id=env.routing.session_key or env.trace_id, parts=outcome.parts_of(payload),
                          metadata=hints.outgoing(f"{env.message_id}-{env.generation}", ctx.budget_left))
    else:  # each turn is a generation of its own: the id is the same on every attempt of this answer
        message = Message(message_id=f"{env.message_id}-{env.generation}", role=Role.ROLE_USER, task_id=asked[0],
                          context_id=asked[1], parts=outcome.parts_of(ctx.answer))
    try:
        answer: Task | Message | None = None
        if asked is not None and env.attempt > 1:  # the answer may have reached it: still asking the same question?
            current = await client.get_task(GetTaskRequest(id=asked[0]))
            waiting = (current.status.state in outcome.INTERRUPTED
                       and outcome.question_of(current) == ctx.turns[-1].question)
            answer = None if waiting else current
        if answer is None:
            async for event in client.send_message(SendMessageRequest(message=message)):
                if event.HasField("message"):
                    answer = event.message
                elif event.HasField("task"):
                    answer = event.task
        while isinstance(answer, Task) and answer.status.state not in outcome.DONE:
            if ctx.cancelled:
                await client.cancel_task(CancelTaskRequest(id=answer.id))
                raise Canceled("cancelled; the remote task was cancelled too")
            await asyncio.sleep(poll_s)
            answer = await client.get_task(GetTaskRequest(id=answer.id))
    except A2AClientTimeoutError as exc:
        raise TransientError(f"the remote agent did not answer in time: {exc}", code="A2A_TIMEOUT") from None
    except TaskNotFoundError as exc:
        raise BusinessError("A2A_TASK_GONE", f"the remote agent no longer has the task this turn answers ({exc}); "
                            "every bridge instance must reach the same remote task store") from None
    except InvalidParamsError as exc:
        raise Reject(f"the remote agent refused the message: {exc}", code="A2A_INVALID_PARAMS") from None
    except A2AClientError as exc:
        if isinstance(exc.__cause__, AnswerTooLarge):  # another attempt would read the same flood
            raise BusinessError("A2A_ANSWER_TOO_LARGE", str(exc.__cause__)) from None
        if isinstance(exc.__cause__, ForbiddenTarget):
            raise BusinessError("A2A_FORBIDDEN_TARGET", str(exc.__cause__)) from None
        if any(code in str(exc) for code in _CLIENT_ERRORS):
            raise Reject(f"the remote agent refused the call: {exc}", code="A2A_REFUSED") from None
        raise TransientError(f"the remote agent is unreachable: {exc}", code="A2A_UNREACHABLE") from None
    except A2AError as exc:  # a JSON-RPC error other than invalid params: the remote's own failure, maybe passing
        raise TransientError(f"the remote agent answered an error: {type(exc).__name__}: {exc}",
                             code="A2A_ERROR") from None
    if answer is None:
        raise TransientError("the remote agent answered nothing", code="A2A_EMPTY")
    return outcome.result_of(answer, seal)


def bridge_agent(*, url: str, capability: str, version: str = "1.0.0", agent_id: str | None = None,
                 region: str | None = None, max_concurrency: int = 8,
                 settings: BridgeSettings) -> Agent:
    """The bridge's Agent; reads the remote card first (RemoteUnreachable when it cannot)."""
    card = asyncio.run(read_card(url, settings))
    skill = card.skills[0] if card.skills else None
    agent = Agent(agent_id or f"agent://a2a/{capability.replace('.', '-')}", region=region,
                  max_concurrency=max_concurrency)
    clients: list[tuple[httpx.AsyncClient, Client]] = []

    @agent.on_start
    async def connect() -> None:  # on the handlers' loop, which the client's connections belong to
        http = http_client(url, settings)
        clients.append((http, ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)))

    @agent.on_stop
    async def close() -> None:
        for http, client in clients:
            await client.close()
            await http.aclose()

    @agent.capability(capability, version=version, tags=list(skill.tags) if skill else ["a2a"],
                      examples=list(skill.examples) if skill else None)
    async def remote(payload: Any, ctx: Context) -> Any:
        seal = outcome.Seal(settings.seal_key(), ctx.envelope.tenant, ctx.envelope.message_id)
        ctx.ignore_returned_usage()  # the remote's `usage` claim stays in the result, never the caller's charge
        return await call(clients[0][1], payload, ctx, settings.poll, seal)

    return agent
