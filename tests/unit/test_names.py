"""Naming rules: namespaces, agent ids, capability names, their topics, and untrusted topic names."""

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


def test_reply_to_must_be_a_reply_topic_of_the_namespace() -> None:
    names = Names("reach")
    assert names.check_reply_to("reach.replies.c0ffee") == "reach.replies.c0ffee"
    assert names.check_reply_to(names.replies("cli-host")) == "reach.replies.cli-host"
    for bad in ("reach.control", "reach.replies.", "other.replies.c1", "reach.replies..x", "reach.receipts",
                "reach.replies.a b", "reach.replies." + "x" * 300):
        with pytest.raises(InvalidName, match="reply topic"):
            names.check_reply_to(bad)


def test_a_delay_target_must_be_a_capability_topic() -> None:
    names = Names("reach")
    assert names.check_target("reach.cap.demo.echo") == "reach.cap.demo.echo"
    for bad in ("reach.control", "reach.cap.", "reach.cap.Demo", "other.cap.demo.echo", "reach.agent.demo.echo"):
        with pytest.raises(InvalidName, match="capability topic"):
            names.check_target(bad)


def test_an_inbox_must_be_the_agents_own() -> None:
    names = Names("reach")
    assert names.check_inbox("agent://search/web", "reach.agent.search.web") == "reach.agent.search.web"
    for bad in ("reach.control", "reach.agent.search.other", "x.agent.search.web"):
        with pytest.raises(InvalidName, match="expected reach.agent.search.web"):
            names.check_inbox("agent://search/web", bad)
    with pytest.raises(InvalidName):
        names.check_inbox("not-an-id", "reach.agent.x")
