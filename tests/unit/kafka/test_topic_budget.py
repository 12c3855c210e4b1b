"""Inboxes sized by agent, their growth by `topics apply`, and a namespace's partition budget (decision 0068)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import NewTopic

from reach.kafka import topics
from reach.kafka.memory.admin import MemoryAdmin
from reach.kafka.memory.bus import Bus
from reach.names import Names

ROOT = Path(__file__).resolve().parents[3]
NS = Names("swarm")


def spec_with(tmp_path: Path, sizes: str, budget: int) -> topics.TopicsFile:
    text = (ROOT / "topics.yaml").read_text()
    text = text.replace("    sizes: {}", f"    sizes: {sizes}").replace("replicas_per_broker: 4000",
                                                                         f"replicas_per_broker: {budget}")
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    return topics.load(path)


def test_an_inbox_is_sized_by_the_first_pattern_its_agent_matches(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, '{"agent://search/*": 8, "agent://*": 1}', 4000)
    assert spec.inbox("agent://search/web").partitions == 8
    assert spec.inbox("agent://echo/main").partitions == 1
    assert topics.load(ROOT / "topics.yaml").inbox("agent://echo/main").partitions == 2  # the shipped default


def test_inbox_names_map_back_to_their_agent() -> None:
    assert NS.inbox_agent(NS.inbox("agent://search/web-2")) == "agent://search/web-2"
    assert NS.inbox_agent("swarm.cap.search") is None and NS.inbox_agent("other.agent.a.b") is None
    assert NS.inbox_agent("swarm.agent.Bad") is None


def test_apply_grows_an_inbox_smaller_than_its_size_and_leaves_a_larger_one(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, '{"agent://search/*": 4, "agent://*": 2}', 4000)
    admin = MemoryAdmin(Bus("budget"))
    for f in admin.create_topics([NewTopic(NS.inbox("agent://search/web"), 2, 1),
                                  NewTopic(NS.inbox("agent://echo/main"), 8, 1)]).values():
        f.result()
    [grow] = topics.inbox_growth(admin, spec, NS)
    assert (grow.action, grow.topic, grow.spec and grow.spec.partitions) == ("add_partitions",
                                                                            NS.inbox("agent://search/web"), 4)
    topics.apply(admin, [grow])
    assert topics.inbox_growth(admin, spec, NS) == []


def test_the_footprint_counts_the_namespace_the_plan_and_projected_agents(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "{}", 100)
    admin = MemoryAdmin(Bus("budget"))
    for f in admin.create_topics([NewTopic(NS.inbox("agent://a/b"), 2, 1), NewTopic("other.cap.x", 50, 1)]).values():
        f.result()
    planned = topics.plan(admin, spec.resolved(NS))
    fixed = sum(c.spec.partitions for c in planned if c.spec)
    used = topics.footprint(admin, spec, "swarm", planned)
    assert (used.partitions, used.replicas, used.brokers) == (2 + fixed, 2 + fixed, 1)  # other.* is not counted
    assert used.over == (2 + fixed > 100)
    more = topics.footprint(admin, spec, "swarm", planned, agents=1_200)
    assert more.partitions == used.partitions + 2_400 and more.over  # 1,200 inboxes at the default 2
    assert "budget of 100" in more.describe()
    wide = spec_with(tmp_path, '{"agent://*": 8}', 100)
    assert topics.footprint(admin, wide, "swarm", planned, agents=1_200).partitions == used.partitions + 9_600
