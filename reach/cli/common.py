"""Shared CLI plumbing: exit codes, error rendering, the console."""

from __future__ import annotations

import getpass
from enum import IntEnum

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.exceptions import TyperException

from reach.errors import ConfigError, InfraUnavailable, InvalidName, ReachError
from reach.settings import ReachSettings, RedisSettings

console = Console()
err_console = Console(stderr=True)


class Exit(IntEnum):
    """The CLI's exit codes, as README.md lists them."""

    OK = 0
    NOT_COMPLETED = 1
    USAGE = 2
    WAIT_TIMEOUT = 3
    UNREACHABLE = 4


def operator_id(settings: ReachSettings) -> str:
    """Who the CLI records on the changes it publishes (the audit history's actor): `reach-cli:<name>`, the name
    from REACH_OPERATOR, else the OS user; `reach-cli` alone when neither is known (no passwd entry)."""
    name = (settings.operator or "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            return "reach-cli"
    return f"reach-cli:{name}"


def check_redis_login(redis: RedisSettings) -> None:
    """Exit 4 at start when the configured Redis refuses this process's TLS set-up or password (no Redis
    configured, or one that does not answer yet, passes: the workers ride out Redis outages)."""
    from reach.redisclient import check_credentials

    try:
        url = redis.url()
    except InfraUnavailable:
        return
    check_credentials(url)


def exit_code_for(error: ReachError) -> int:
    if isinstance(error, InfraUnavailable):
        return Exit.UNREACHABLE
    if isinstance(error, (ConfigError, InvalidName)):
        return Exit.USAGE
    return getattr(error, "exit_code", Exit.USAGE)


def run_guarded(app: typer.Typer) -> int:
    try:
        # In non-standalone mode click returns the code of a `typer.Exit` instead of raising it.
        code = app(standalone_mode=False)
    except ReachError as error:
        err_console.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False)
        return exit_code_for(error)
    except (typer.Exit, click.exceptions.Exit) as done:
        return int(getattr(done, "exit_code", 0))
    except (typer.Abort, click.exceptions.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        return 130
    except (TyperException, click.ClickException) as usage:
        # typer >= 0.20 vendors click: its usage errors are TyperExceptions, not click's.
        show = getattr(usage, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(f"[bold red]error:[/] {escape(str(usage))}")
        return Exit.USAGE
    return code if isinstance(code, int) else Exit.OK
