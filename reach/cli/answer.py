"""`reach answer MESSAGE_ID --payload JSON`: answer the question a waiting message asks (INPUT_REQUIRED)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import typer

from reach.cli.common import Exit, console, err_console
from reach.cli.send import parse_payload
from reach.client import Client
from reach.core.turns import AnswerRefused
from reach.errors import InfraUnavailable
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.webclient import auth_headers, get_json, views_url


def answer(
    message_id: str = typer.Argument(..., help="The message_id of the message waiting for input."),
    payload: str = typer.Option(..., "--payload", help="the answer as JSON; it must satisfy the question's schema "
                                "(`reach status MESSAGE_ID` shows the question)"),
    wait: bool = typer.Option(False, "--wait", help="wait for the next turn's ending and print its status (exit 0 "
                              "for COMPLETED, 1 another ending, 3 timeout); a new question ends the wait too"),
    timeout: float = typer.Option(30.0, "--timeout", help="seconds --wait waits"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Answer MESSAGE_ID's question: the answer, checked against its schema, runs the message's next turn on the
    same agent. An operator's answer: any tenant. Exit 2 when it is refused (wrong schema, not waiting, past its
    deadline, unknown), 4 when the broker, Redis or the stream app does not answer."""
    value = parse_payload(payload)
    settings, kafka = ReachSettings(), KafkaSettings()
    base, auth = views_url(settings), auth_headers(settings)
    with Client(kafka=kafka, settings=settings, source="reach-cli") as client:
        reply_to = None
        if wait:
            from reach.invoke import host_client_id

            reply_to = client.replies(host_client_id()).topic
        try:
            taken = client.answer(message_id, value, status_url=base, reply_to=reply_to,
                                  redis_url=RedisSettings().url(settings.home))
        except AnswerRefused as refused:
            err_console.print(f"[bold red]refused ({refused.code}):[/] {refused.message}"
                              + (f"\n  {refused.hint}" if refused.hint else ""), highlight=False)
            if refused.status >= 500:
                raise InfraUnavailable(refused.message) from None
            raise typer.Exit(Exit.USAGE) from None
        if not wait:
            shown = {"message_id": taken.message_id, "generation": taken.generation, "turn": taken.turn}
            if as_json:
                print(json.dumps(shown))
            else:
                console.print(f"answer to {message_id} (turn {taken.turn}) taken: it runs again as generation "
                              f"{taken.generation}; `reach status {message_id}` follows it", highlight=False)
            return
        _wait(client, message_id, taken.generation, timeout=timeout, as_json=as_json, base=base, auth=auth)


def _wait(client: Client, message_id: str, generation: int, *, timeout: float, as_json: bool, base: str,
          auth: dict[str, str]) -> None:
    """The next turn ends (a terminal receipt on the reply topic) or asks again (INPUT_REQUIRED on its row)."""
    import time

    from reach.invoke import result_value

    inbox = client.replies()
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        receipt = inbox.poll(message_id, generation=generation, timeout_s=0.5)
        if receipt is not None:
            result = result_value(receipt)
            body = {"message_id": message_id, "generation": generation, "status": str(receipt.status),
                    "result": result.decode(errors="replace") if isinstance(result, bytes) else result,
                    "error": receipt.error.model_dump() if receipt.error else None}
            _print(body, as_json)
            if str(receipt.status) != "COMPLETED":
                raise typer.Exit(Exit.NOT_COMPLETED)
            return
        row = get_json(base, f"/messages/{quote(message_id, safe='')}", auth=auth)
        if row.get("status") == "INPUT_REQUIRED" and row.get("generation") == generation:
            _print({"message_id": message_id, "generation": generation, "status": "INPUT_REQUIRED",
                    "question": (row.get("input") or {}).get("question"),
                    "answer_schema": json.loads((row.get("input") or {}).get("answer_schema") or "{}")}, as_json)
            return
    console.print(f"timed out after {timeout:g}s; `reach status {message_id}` shows where it is", highlight=False)
    raise typer.Exit(Exit.WAIT_TIMEOUT)


def _print(body: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(body))
        return
    console.print(f"{body['message_id']} [bold]{body['status']}[/] (generation {body['generation']})",
                  highlight=False)
    for name in ("question", "answer_schema", "result", "error"):
        if body.get(name) is not None:
            console.print(f"  {name:<13} {json.dumps(body[name])}", highlight=False)
