"""`reach answer MESSAGE_ID --payload JSON`: answer the question a waiting message asks (INPUT_REQUIRED)."""

from __future__ import annotations

import json

import typer

from reach.cli.common import Exit, console, err_console
from reach.cli.send import parse_payload, print_receipt
from reach.client import Client
from reach.core.turns import AnswerRefused
from reach.errors import InfraUnavailable
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.webclient import views_url


def answer(
    message_id: str = typer.Argument(..., help="The message_id of the message waiting for input."),
    payload: str = typer.Option(..., "--payload", help="the answer as JSON; it must satisfy the question's schema "
                                "(`reach status MESSAGE_ID` shows the question)"),
    wait: bool = typer.Option(False, "--wait", help="wait for the next turn's ending, or its next question, and "
                              "print it as `reach send --wait` does (exit 0 for COMPLETED, 1 another ending or a "
                              "question, 3 timeout)"),
    timeout: float = typer.Option(30.0, "--timeout", help="seconds --wait waits"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Answer MESSAGE_ID's question: the answer, checked against its schema, runs the message's next turn on the
    same agent. An operator's answer: any tenant. Exit 2 when it is refused (wrong schema, not waiting, past its
    deadline, unknown), 4 when the broker, Redis or the stream app does not answer."""
    value = parse_payload(payload)
    settings, kafka = ReachSettings(), KafkaSettings()
    with Client(kafka=kafka, settings=settings, source="reach-cli") as client:
        reply_to = None
        if wait:
            from reach.invoke import host_client_id

            reply_to = client.replies(host_client_id()).topic
        try:
            taken = client.answer(message_id, value, status_url=views_url(settings), reply_to=reply_to,
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
        _wait(client, message_id, taken.generation, timeout=timeout, as_json=as_json)


def _wait(client: Client, message_id: str, generation: int, *, timeout: float, as_json: bool) -> None:
    """The next turn's reply: its ending, or its own question (INPUT_REQUIRED), as `reach send --wait` prints it."""
    from reach.invoke import InvokeTimeout

    try:
        receipt = client.replies().wait(message_id, generation=generation, timeout_ms=max(int(timeout * 1000), 1))
    except InvokeTimeout as exc:
        console.print(f"timed out after {timeout:g}s: {exc}", highlight=False)
        raise typer.Exit(Exit.WAIT_TIMEOUT) from None
    print_receipt(receipt, as_json=as_json)
