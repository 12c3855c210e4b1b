"""What a registration declares, checked on the real broker before an instance registers (issue 41 item 3): a
capability version that another live instance serves with another contract is refused with the difference; a
`depends_on` naming a capability nobody serves is refused, a known one registers and shows in `reach agents`; and
a registration that would close a dependency cycle is refused with the cycle named."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from reach.agent import Agent
from reach.agent.modes import RegistrationRefused
from reach.names import Names
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import reach_cli, running, wait_for

pytestmark = pytest.mark.integration


def serving(agent_id: str, capability: str, *, schema: dict[str, Any] | None = None,
            depends_on: list[str] | None = None, owner: str | None = None) -> Agent:
    agent = Agent(agent_id, depends_on=depends_on, owner=owner, max_concurrency=1)

    @agent.capability(capability, version="1.0.0", input_schema=schema or {"type": "object"})
    async def handle(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    return agent


def registered(namespace: str, *agents: Agent) -> None:
    wanted = {a.instance_id for a in agents}
    wait_for(lambda: wanted <= {r.instance_id for r in read_registry(KafkaSettings(), Names(namespace), timeout=5)
                                .live(time.time_ns() // 1_000_000)}, 60, "the instances READY in the registry")


def refused(agent: Agent) -> str:
    with pytest.raises(RegistrationRefused) as caught:
        agent.run(install_signals=False)
    return str(caught.value)


def test_contracts_and_dependencies_are_checked_before_registering(namespace: str) -> None:
    run = uuid.uuid4().hex[:6]
    search, answer = f"decl{run}.search", f"decl{run}.answer"
    searcher = serving(f"agent://decl/search-{run}", search, schema={"type": "object", "required": ["q"]})
    with running(searcher):
        registered(namespace, searcher)
        changed = serving(f"agent://decl/search2-{run}", search, schema={"type": "object", "required": ["query"]})
        problem = refused(changed)
        assert f"{search}@1.0.0" in problem and "One version, one contract" in problem
        assert '"q"' in problem and '"query"' in problem, "the refusal shows the difference"

        assert f"decl{run}.ghost, which no agent serves" in refused(
            serving(f"agent://decl/lost-{run}", answer, depends_on=[f"decl{run}.ghost"]))

        answerer = serving(f"agent://decl/answer-{run}", answer, depends_on=[f"{search}@^1"],
                           owner="email:docs@example.com")
        with running(answerer):
            registered(namespace, answerer)
            listed = reach_cli("agents", "--json")
            assert listed.returncode == 0, listed.stderr
            row = next(r for r in json.loads(listed.stdout) if r["instance_id"] == answerer.instance_id)
            assert row["depends_on"] == [f"{search}@^1"] and row["owner"] == "email:docs@example.com"

            loop = serving(f"agent://decl/search-{run}", search, schema={"type": "object", "required": ["q"]},
                           depends_on=[answer])
            problem = refused(loop)
            assert f"{search} -> {answer} -> {search}" in problem, problem
