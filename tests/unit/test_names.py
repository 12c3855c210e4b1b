"""Naming rules: namespaces, agent ids, capability names and their topics."""

import pytest

from reach.errors import InvalidName
from reach.names import Names, check_agent_id, check_capability


def test_topics_follow_the_namespace() -> None:
    names = Names("reach")
    assert names.inbox("agent://search/web") == "reach.agent.search.web"
    assert names.capability("contract.analysis") == "reach.cap.contract.analysis"
    assert names.receipts == "reach.receipts"
    assert names.retry("10s") == "reach.retry.10s"
    assert names.family_of("reach.agent.search.web") == "agent"
    assert names.family_of("reach.receipts") is None


@pytest.mark.parametrize("bad", ["search/web", "agent://Search/web", "agent://search/-web", "agent://", "agent://a//b"])
def test_invalid_agent_ids_name_the_rule(bad: str) -> None:
    with pytest.raises(InvalidName, match="agent://|must match"):
        check_agent_id(bad)


@pytest.mark.parametrize("bad", ["", "Contract", "contract..analysis", ".x", "a b"])
def test_invalid_capability(bad: str) -> None:
    with pytest.raises(InvalidName, match="dotted lower-case"):
        check_capability(bad)
