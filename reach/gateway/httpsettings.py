"""The HTTP service's limits and timeouts, read from REACH_GATEWAY_* environment variables.

| variable                               | default            | meaning                                              |
|----------------------------------------|--------------------|------------------------------------------------------|
| REACH_GATEWAY_MAX_BODY_BYTES           | 294912 (288 KiB)   | largest request body read for one envelope / invoke  |
|                                        |                    | (the payload itself: 256 KiB, reach.envelopes)       |
| REACH_GATEWAY_MAX_BATCH_BYTES          | 8388608 (8 MiB)    | largest body of `POST /v1/envelopes:batch`           |
| REACH_GATEWAY_MAX_BATCH_ITEMS          | 500                | most envelopes in one batch                          |
| REACH_GATEWAY_INVOKE_TIMEOUT_MS        | 30000              | `POST /v1/invoke` wait when the body names none      |
| REACH_GATEWAY_INVOKE_TIMEOUT_MAX_MS    | 120000             | cap on the wait a body may ask for                   |
| REACH_GATEWAY_IDEMPOTENCY_TTL          | 86400 (seconds)    | how long an app's idempotency_key maps to its 202    |
| REACH_GATEWAY_ACK_TIMEOUT              | 10 (seconds)       | wait for the broker's acknowledgement before a 503   |
| REACH_GATEWAY_STATUS_URL               | (stream app views) | base URL of the status views; default REACH_WEB_HOST |
|                                        |                    | and REACH_WEB_PORT                                   |
| REACH_GATEWAY_SSE_POLL                 | 0.25 (seconds)     | how often an event stream re-reads the status row    |
| REACH_GATEWAY_SSE_MAX                  | 600 (seconds)      | longest an event stream stays open                   |
| REACH_GATEWAY_SSE_PER_APP              | 16                 | event streams one app may hold open on one gateway   |
|                                        |                    | process at once (429 past it)                        |
| REACH_GATEWAY_WAITS_PER_APP            | 32                 | calls one app may have waiting on the status table   |
|                                        |                    | on one gateway process (a blocking A2A SendMessage   |
|                                        |                    | or CancelTask, an invoke repeating an                |
|                                        |                    | idempotency_key): 429 `too_many_waits` past it       |
| REACH_GATEWAY_SSE_FIND                 | 5 (seconds)        | how long an event stream waits for a new message row |
| REACH_GATEWAY_KEEP_ALIVE               | 5 (seconds)        | idle keep-alive connections are closed after this    |
| REACH_GATEWAY_MAX_HEADER_BYTES         | 16384              | largest request head (431 past it)                   |
| REACH_GATEWAY_BODY_TIMEOUT             | 10 (seconds)       | a body that does not arrive in this time gets a 408  |
| REACH_GATEWAY_PUBLIC_URL               | (the socket)       | the URL callers reach this gateway at, as A2A cards  |
|                                        |                    | advertise it; default: the address of the socket the |
|                                        |                    | request came in on (never the caller's Host header)  |
| REACH_GATEWAY_TRACE_ROWS               | 500                | most status rows one `GET /v1/traces/{id}` reads     |
|                                        |                    | (one read token per 25 of them)                      |
| REACH_GATEWAY_MCP_SESSIONS_PER_APP     | 16                 | MCP sessions one app may hold on one gateway process |
| REACH_GATEWAY_MCP_SESSIONS             | 1000               | MCP sessions on one gateway process, all apps        |
| REACH_GATEWAY_MCP_IDLE                 | 300 (seconds)      | an MCP session without a request for this long ends  |
| REACH_GATEWAY_MCP_ORIGINS              | (none)             | browser origins allowed to call /mcp (comma list);   |
|                                        |                    | the public URL's origin always is; a request with    |
|                                        |                    | another `Origin` header is 403                       |
| REACH_GATEWAY_MCP_AUTHORIZATION_SERVERS| (the public URL)   | `authorization_servers` of /mcp's protected resource |
|                                        |                    | metadata (comma list)                                |
| REACH_GATEWAY_MCP_TASK_AFTER_MS        | 5000               | a /mcp tool call of a client that declares the Tasks |
|                                        |                    | extension answers a task handle when its message has |
|                                        |                    | not ended within this (then tasks/get polls it)      |
| REACH_GATEWAY_METRICS_TOKEN            | (none)             | bearer token `GET /metrics` needs; unset, /metrics   |
|                                        |                    | answers loopback peers only                          |

Where it listens (REACH_GATEWAY_HOST / REACH_GATEWAY_PORT) and how it checks callers are in
reach.gateway.settings (GatewaySettings).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reach.envelopes import MAX_PAYLOAD_BYTES


class HttpSettings(BaseSettings):
    """What one gateway process accepts and how long it waits."""

    model_config = SettingsConfigDict(env_prefix="REACH_GATEWAY_", frozen=True, extra="ignore")

    max_body_bytes: int = Field(default=MAX_PAYLOAD_BYTES + 32 * 1024, ge=1024)
    max_batch_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_batch_items: int = Field(default=500, ge=1, le=500)
    invoke_timeout_ms: int = Field(default=30_000, ge=1)
    invoke_timeout_max_ms: int = Field(default=120_000, ge=1)
    idempotency_ttl: int = Field(default=24 * 3600, ge=1)
    ack_timeout: float = Field(default=10.0, gt=0)
    status_url: str | None = None
    sse_poll: float = Field(default=0.25, gt=0)
    sse_max: float = Field(default=600.0, gt=0)
    sse_find: float = Field(default=5.0, ge=0)
    sse_per_app: int = Field(default=16, ge=1)
    waits_per_app: int = Field(default=32, ge=1)
    keep_alive: float = Field(default=5.0, gt=0)
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    body_timeout: float = Field(default=10.0, gt=0)
    public_url: str | None = None
    trace_rows: int = Field(default=500, ge=1)
    mcp_sessions_per_app: int = Field(default=16, ge=1)
    mcp_sessions: int = Field(default=1000, ge=1)
    mcp_idle: float = Field(default=300.0, gt=0)
    mcp_origins: str = ""
    mcp_authorization_servers: str = ""
    mcp_task_after_ms: int = Field(default=5000, ge=0)
    metrics_token: SecretStr | None = None

    def listed(self, value: str) -> tuple[str, ...]:
        """A comma list setting as its items (blanks dropped, a trailing `/` of a URL too)."""
        return tuple(item.strip().rstrip("/") for item in value.split(",") if item.strip())

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError(f"REACH_GATEWAY_PUBLIC_URL {value[:200]!r} is not an http(s) base URL; expected e.g. "
                             "https://gateway.example.com or http://10.0.0.5:8080")
        return value.rstrip("/") + "/"
