"""`reach send CAPABILITY --payload JSON` (or `--intent TEXT`): publish one envelope and print its message_id."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from reach.cli.common import console
from reach.client import Client
from reach.core.allowance import check_budget, cost_micros
from reach.core.durations import parse_ms
from reach.core.timeouts import check_timeout_ms
from reach.errors import ReachError
from reach.records import Receipt


class BadPayload(ReachError):
    """--payload is not JSON."""


def parse_payload(text: str) -> Any:
    """The JSON value of --payload, or a usage error saying how to quote it."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadPayload(f"--payload is not valid JSON ({exc}); quote it, e.g. --payload '{{\"text\": \"hi\"}}'.") \
            from None


def send(
    capability: str | None = typer.Argument(None, help="capability name, e.g. demo.echo (omit with --intent)"),
    intent: str | None = typer.Option(None, "--intent", help="what is wanted, in words or an intent id, instead "
                                      "of a capability: the resolver picks one (docs/intent.md)"),
    session_snapshot: str | None = typer.Option(None, "--session-snapshot", help="the session's first snapshot: a "
                                                "JSON object (ctx.session) or a reference (topic:key, an object URI)"),
    tag: list[str] | None = typer.Option(None, "--tag", help="a routing tag (repeatable): instances whose "
                                         "capability carries every tag are preferred; subscribers filter on them"),
    strict_tags: bool = typer.Option(False, "--strict-tags", help="with --tag: only instances carrying every tag "
                                     "may serve it (none: UNROUTABLE), never an untagged one"),
    payload: str = typer.Option(..., "--payload", help="the request as JSON"),
    version: str = typer.Option("*", "--version", help="semver range of the capability, e.g. ^1.0"),
    session: str | None = typer.Option(None, "--session", help="session key (ordering and affinity)"),
    to: str | None = typer.Option(None, "--to", help="only this agent id may serve it"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key", help="business key: a second send "
                                               "with it (same tenant and capability) reuses the first's result"),
    priority: int = typer.Option(0, "--priority", help="routing priority (higher = more urgent); the priority "
                                 "scoring factor prefers instances whose priority_class matches it"),
    callback: str | None = typer.Option(None, "--callback", help="deliver the outcome through a channel: "
                                        "webhook:URL, email:ADDRESS, sms:NUMBER or the JSON spec (docs/channels.md)"),
    callback_fields: str | None = typer.Option(None, "--callback-fields", help="JSONPath of the result the "
                                               "callback carries, comma-separated, e.g. '$.answer,$.items[0].id'"),
    execution_timeout: str | None = typer.Option(None, "--execution-timeout", help="ask for a shorter run than "
                                                 "the agent declares, e.g. 5s (the POLICY caps it; default not set)"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="budget: input + output tokens this request "
                                          "and the requests it causes may spend (docs/agents.md)"),
    max_cost: str | None = typer.Option(None, "--max-cost", help="budget: cost in units of the deployment's currency, "
                                        "e.g. 0.25, this request and the requests it causes may spend"),
    wait: bool = typer.Option(False, "--wait", help="wait for the terminal receipt (or the agent's question, "
                              "INPUT_REQUIRED) and print it (exit 0 only for COMPLETED, 1 other endings and a "
                              "question, 3 timeout)"),
    timeout: float = typer.Option(30.0, "--timeout", help="seconds --wait waits"),
    as_json: bool = typer.Option(False, "--json", help="with --wait: print the receipt as JSON"),
    follow: bool = typer.Option(False, "--follow", help="with --wait: print the agent's partial results (ctx.emit) "
                                "as they come, and its progress on stderr, before the terminal receipt"),
) -> None:
    """Publish a request for CAPABILITY to its capability topic; prints the message_id."""
    body = parse_payload(payload)
    extra: dict[str, Any] = {} if callback is None and callback_fields is None else {
        "callback": callback, "callback_fields": callback_fields}
    if intent is not None:
        from reach.intent.catalog import RESERVED

        if capability not in (None, RESERVED):
            raise BadPayload(f"Give a capability or --intent, not both (got {capability!r} and --intent); "
                             f"with --intent the capability is {RESERVED}.")
        capability, extra["intent"] = RESERVED, intent
    if capability is None:
        raise BadPayload("Name a CAPABILITY (e.g. `reach send demo.echo --payload ...`) or give --intent TEXT.")
    if session_snapshot is not None:
        extra["session_snapshot"] = session_snapshot
    if strict_tags and not tag:
        raise BadPayload("--strict-tags makes the request's tags a must: give them with --tag NAME.")
    if tag:
        extra["tags"], extra["strict_tags"] = list(tag), strict_tags
    if execution_timeout is not None:
        ms = parse_ms(execution_timeout, bare="ms", what="--execution-timeout", hint="expected e.g. 500ms, 5s or 2m.")
        extra["execution_timeout_ms"] = check_timeout_ms(ms, what="--execution-timeout")
    if max_tokens is not None:
        extra["max_tokens"] = check_budget(max_tokens, "--max-tokens")
    if max_cost is not None:
        extra["max_cost_micros"] = cost_micros(max_cost, "--max-cost")
    if follow and not wait:
        raise BadPayload("--follow prints a request's partial results while --wait waits for it: add --wait.")
    if wait:
        send_and_wait(capability, body, timeout=timeout, as_json=as_json, follow=follow, version=version,
                      session_key=session,
                      to_agent=to, idempotency_key=idempotency_key, priority=priority, **extra)
        return
    with Client(source="reach-cli") as client:
        message_id = client.send(capability, body, version=version, session_key=session, to_agent=to,
                                 idempotency_key=idempotency_key, priority=priority, **extra)
    console.print(message_id, highlight=False)


def follow_receipt(client: Client, capability: str, body: Any, *, timeout_ms: int, **fields: Any) -> Receipt:
    """Send, print each partial result to stdout as it comes (text as is, JSON one per line; a replacing chunk
    on a new line) and each progress change to stderr; return the terminal receipt."""
    from reach.invoke import StreamChunk, StreamProgress, stream_request, views_row_of
    from reach.webclient import auth_headers, views_url

    out, streamed = sys.stdout, False
    row_of = views_row_of(views_url(client.settings), auth_headers(client.settings))
    for item in stream_request(client, client.replies(), row_of, capability, body,
                               timeout_ms=timeout_ms, **fields):
        if isinstance(item, StreamChunk):
            text = item.data if item.kind == "text" else json.dumps(item.data) + "\n"
            out.write(("\n" if streamed and not item.append else "") + text)
            out.flush()
            streamed = True
        elif isinstance(item, StreamProgress):
            shown = "-" if item.fraction is None else f"{item.fraction:.0%}"
            print(f"progress {shown} {item.note or ''}".rstrip(), file=sys.stderr, flush=True)
        else:
            if streamed:
                out.write("\n")
            return item
    raise AssertionError("stream_receipt ends with the terminal receipt")  # pragma: no cover


def send_and_wait(capability: str, body: Any, *, timeout: float, as_json: bool, follow: bool = False,
                  **fields: Any) -> None:
    """Send with reply_to = this host's CLI reply topic, print the terminal receipt, exit by its status."""
    from reach.cli.common import Exit
    from reach.invoke import Followed, InvokeTimeout, host_client_id

    timeout_ms = max(int(timeout * 1000), 1)
    with Client(source="reach-cli") as client:
        client.replies(host_client_id())
        try:
            if follow:
                followed = Followed((follow_receipt(client, capability, body, timeout_ms=timeout_ms, **fields),))
            else:
                followed = client.invoke_outcome(capability, body, timeout_ms=timeout_ms, **fields)
        except InvokeTimeout as exc:
            console.print(f"timed out after {timeout:g}s: {exc}", highlight=False)
            raise typer.Exit(Exit.WAIT_TIMEOUT) from None
    print_receipt(followed.receipt, as_json=as_json, first=followed.first)


def print_receipt(receipt: Receipt, *, as_json: bool, first: Receipt | None = None) -> None:
    """A waited-for receipt (its ending, or the question it asks), then exit 1 unless it COMPLETED. `first`: the
    request's own ending when its capability's fallback served it (`receipt` is then the fallback child's)."""
    from reach.cli.common import Exit
    from reach.invoke import result_value
    from reach.records import Status

    result = result_value(receipt)
    if as_json:
        console.print_json(json.dumps({
            "message_id": receipt.message_id, "status": str(receipt.status), "agent_id": receipt.agent_id,
            "instance_id": receipt.instance_id, "attempt": receipt.attempt,
            "result": result.decode(errors="replace") if isinstance(result, bytes) else result,
            "error": receipt.error.model_dump() if receipt.error else None,
            "retry_after_ms": receipt.retry_after_ms,
            "input": receipt.input.model_dump() if receipt.input else None,
            **({} if first is None else {"first": {"message_id": first.message_id, "capability": first.capability,
                                                   "status": str(first.status)}}),
        }))
    else:
        if first is not None:  # the request's own ending went on to its fallback; the chain's outcome follows
            console.print(f"{first.message_id} {first.status} ({first.capability}); served by its fallback "
                          f"{receipt.capability} as {receipt.message_id}", highlight=False)
        console.print(f"{receipt.message_id} [bold]{receipt.status}[/]", highlight=False)
        console.print(f"  agent     {receipt.agent_id or '-'}  instance {receipt.instance_id or '-'}  "
                      f"attempt {receipt.attempt}", highlight=False)
        if receipt.error is not None:
            console.print(f"  error     {receipt.error.kind}/{receipt.error.code}: {receipt.error.message}",
                          highlight=False)
        if receipt.retry_after_ms:
            console.print(f"  retry in  {receipt.retry_after_ms} ms", highlight=False)
        if result is not None:
            shown = json.dumps(result) if not isinstance(result, bytes) else repr(result)
            console.print(f"  result    {shown}", highlight=False)
        if receipt.input is not None:  # INPUT_REQUIRED: the handler asks before it can finish
            console.print(f"  asks      {receipt.input.question}\n  schema    {receipt.input.answer_schema}\n"
                          f"  answer    reach answer {receipt.message_id} --payload JSON [--wait]", highlight=False)
    if receipt.status is not Status.COMPLETED:
        raise typer.Exit(Exit.NOT_COMPLETED)
