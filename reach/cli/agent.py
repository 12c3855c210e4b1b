"""`reach agent run module:attr`: run one instance of an agent defined in Python."""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import sys

import typer

from reach.agent import Agent
from reach.cli.common import check_redis_login
from reach.errors import ReachError
from reach.settings import RedisSettings

app = typer.Typer(help="Run agents.", no_args_is_help=True)


class BadTarget(ReachError):
    """`module:attr` does not name an Agent."""


def load_agent(target: str) -> Agent:
    """Import `module:attr` (the current directory is importable) and return the Agent it names."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise BadTarget(f"Expected MODULE:ATTR, e.g. examples.echo_agent:agent; got {target!r}.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BadTarget(f"Cannot import {module_name!r} ({exc}); run from the directory that contains it, "
                        "or add it to PYTHONPATH.") from None
    agent = getattr(module, attr, None)
    if not isinstance(agent, Agent):
        raise BadTarget(f"{target} is {type(agent).__name__}, expected a reach.agent.Agent.")
    return agent


@app.command()
def run(target: str = typer.Argument(..., help="MODULE:ATTR of an Agent, e.g. examples.echo_agent:agent"),
        log_level: str = typer.Option("INFO", "--log-level", help="Python logging level")) -> None:
    """Run one instance until SIGTERM/SIGINT: register, consume its inbox, drain, deregister."""
    faulthandler.enable(all_threads=True)  # a native crash (librdkafka) prints every thread's stack to stderr
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    agent = load_agent(target)
    agent.validate()
    check_redis_login(RedisSettings())  # exit 4 now on a refused Redis login or TLS handshake, not a retry loop
    logging.getLogger("reach.agent").info("starting %s as instance %s", agent.agent_id, agent.instance_id)
    agent.run()
