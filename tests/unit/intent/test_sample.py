"""The held-out set is honest: no paraphrase shares a content word with its capability, so word overlap fails."""

from __future__ import annotations

import re

from reach.intent.sample import CATALOG, UNRELATED
from reach.intent.text import phrase_of_name

STOP = set("""a an the is it to in on for of and or with my me i you do how what will be there any this that
at by from into get can should need want us our your some good one two next all about as are am up off out
when where which who why would could give put let go going make""".split())


def words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]+", text.lower()) if w not in STOP and len(w) > 1}


def described(cap: object) -> set[str]:
    c = cap  # a SampleCapability
    return words(" ".join([c.description, *c.examples, *c.tags, phrase_of_name(c.name)]))  # type: ignore


def test_the_set_is_big_enough_and_shares_no_content_word() -> None:
    assert len(CATALOG) >= 5 and sum(len(c.paraphrases) for c in CATALOG) >= 30 and len(UNRELATED) == 20
    for cap in CATALOG:
        for paraphrase in cap.paraphrases:
            shared = words(paraphrase) & described(cap)
            assert not shared, f"{paraphrase!r} shares {shared} with {cap.name}"


def test_word_overlap_cannot_pass_it() -> None:
    right = 0
    for cap in CATALOG:
        for paraphrase in cap.paraphrases:
            overlaps = {c.name: len(words(paraphrase) & described(c)) for c in CATALOG}
            best = max(overlaps.values())
            right += best > 0 and overlaps[cap.name] == best
    assert right / sum(len(c.paraphrases) for c in CATALOG) < 0.2
