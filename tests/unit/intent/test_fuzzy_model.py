"""The fuzzy merge with the real model on the sample catalog plus a support family (docs/decisions/0022).

`pytest -s tests/unit/intent/test_fuzzy_model.py` prints the figures the decision record quotes.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from reach.intent import catalog
from reach.intent.model import shared_model
from reach.intent.sample import CATALOG, SUPPORT_FAMILY, UNRELATED, SampleCapability
from reach.intent.semantic import SemanticIndex
from reach.intent.stages import Thresholds, resolve
from reach.records import AgentRegistration, Capability


def _capability(cap: SampleCapability) -> Capability:
    tags = [*cap.tags, *([catalog.SIDE_EFFECT_FREE_TAG] if cap.side_effect_free else []),
            *([catalog.GENERIC_TAG] if cap.generic else [])]
    return Capability(name=cap.name, version="1.0.0", tags=tags, examples=[json.dumps(e) for e in cap.examples],
                      input_schema=json.dumps({"type": "object", "description": cap.description}))


def test_the_merge_takes_only_what_no_stage_placed_and_keeps_every_paraphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reg = AgentRegistration(agent_id="agent://demo/intents", instance_id="i", build_version="1", state="READY",
                            heartbeat_at=0, ttl_ms=1000, inbox_topic="t.agent.demo.intents",
                            capabilities=[_capability(c) for c in (*CATALOG, *SUPPORT_FAMILY)])
    entries = catalog.build([reg])
    index = SemanticIndex(shared_model(), entries)
    live = frozenset(entries)
    sef = frozenset(e.capability for e in entries.values() if e.side_effect_free)
    generics = catalog.generics(entries)
    assert generics == {"support": "support.general"}
    requests = [*(p for c in CATALOG for p in c.paraphrases), *UNRELATED, *SUPPORT_FAMILY[-1].paraphrases]
    ranks = {r: index.rank(r) for r in requests}

    def stages(fuzzy: bool) -> dict[str, tuple[str, str | None]]:
        th = Thresholds(fuzzy=fuzzy)
        return {r: (res.stage, res.capability) for r in requests
                if (res := resolve(r, exact={}, live=live, side_effect_free=sef, rank=ranks.__getitem__,
                                   thresholds=th, generics=generics))}

    off, on = stages(False), stages(True)
    changed = {r: (off[r], on[r]) for r in requests if off[r] != on[r]}
    assert all(before[0] == "handoff" and after == ("fuzzy", "support.general")
               for before, after in changed.values())  # the merge only takes what would go to a human
    paraphrases = [p for c in CATALOG for p in c.paraphrases]
    assert all(off[p] == on[p] for p in paraphrases)  # nothing the other stages placed moves
    assert on[SUPPORT_FAMILY[-1].paraphrases[0]] == ("fuzzy", "support.general")
    merged_unrelated = [r for r in UNRELATED if on[r][0] == "fuzzy"]
    print(f"\nwith the support family: unrelated handed off {Counter(off[r][0] for r in UNRELATED)['handoff']}"
          f"/{len(UNRELATED)} without the fuzzy stage, {Counter(on[r][0] for r in UNRELATED)['handoff']} with it; "
          f"merged into support.general: {merged_unrelated}; paraphrases changed: 0/{len(paraphrases)}; "
          + "; ".join(f"{r!r}: " + ", ".join(f"{m.capability} {m.score:.2f}" for m in ranks[r][:3])
                      for r in merged_unrelated))
