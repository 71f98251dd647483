# Property tests for common/broker/topics.py (CPython only): the trie and the
# retained tree agree with the reference matcher topic_matches(), and
# filter_covers() is sound and exact against it.

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from common.broker.topics import (
    SHARED_INVALID,
    SubscriptionTrie,
    TopicTree,
    filter_covers,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)

# A small alphabet so that filters and topics collide often; "$" levels
# exercise [MQTT-4.7.2-1] and "" levels the empty-level rules.
LITERALS = ["a", "b", "", "$a", "$"]
literal = st.sampled_from(LITERALS)


@st.composite
def topics(draw: Any) -> str:
    return "/".join(draw(st.lists(literal, min_size=1, max_size=4))) or "a"


@st.composite
def filters(draw: Any) -> str:
    levels = draw(st.lists(st.sampled_from([*LITERALS, "+", "+"]), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    if levels == [""]:
        levels = ["a"]
    return "/".join(levels)


class Entry:
    def __init__(self, flt: str) -> None:
        self.flt = flt


def test_generators_are_valid() -> None:
    # the strategies only produce valid names and filters
    @given(topics(), filters())
    def check(topic: str, flt: str) -> None:
        assert validate_topic_name(topic, 0, 0) == 0, topic
        assert validate_topic_filter(flt, 0, 0) == 0, flt

    check()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(filters(), max_size=25),
    st.lists(topics(), min_size=1, max_size=15),
    st.sampled_from([0, 300, 1 << 20]),
)
def test_trie_agrees_with_reference(flts: list[str], tops: list[str], cache: int) -> None:
    trie = SubscriptionTrie(cache)
    entries = [Entry(f) for f in flts]
    for e in entries:
        trie.add(e.flt, e)
    assert trie.count == len(entries)
    out: list[Entry] = []
    for _ in range(2):  # the second pass runs from the cache when enabled
        for t in tops:
            del out[:]
            trie.match(t, out)
            want = [e for e in entries if topic_matches(e.flt, t)]
            assert sorted(id(e) for e in out) == sorted(id(e) for e in want), (
                t,
                [e.flt for e in out],
            )
    # remove half, check again, then remove the rest: the trie is empty
    for e in entries[::2]:
        assert trie.remove(e.flt, e)
        assert not trie.remove(e.flt, e)
    rest = entries[1::2]
    for t in tops:
        del out[:]
        trie.match(t, out)
        want = [e for e in rest if topic_matches(e.flt, t)]
        assert sorted(id(e) for e in out) == sorted(id(e) for e in want)
    for e in rest:
        assert trie.remove(e.flt, e)
    assert trie.count == 0
    assert trie._root == [None, None, None, None]


@settings(max_examples=200, deadline=None)
@given(st.lists(filters(), min_size=1, max_size=12), topics())
def test_trie_order_is_deterministic(flts: list[str], topic: str) -> None:
    # same adds in the same order -> same result order, whatever the history
    a = SubscriptionTrie()
    b = SubscriptionTrie(1 << 16)
    ea = [Entry(f) for f in flts]
    for e in ea:
        a.add(e.flt, e)
        b.add("zz/" + e.flt, e)  # unrelated branch...
    for e in ea:
        b.remove("zz/" + e.flt, e)  # ...removed again
    for e in ea:
        b.add(e.flt, e)
    oa: list[Entry] = []
    ob: list[Entry] = []
    a.match(topic, oa)
    b.match(topic, ob)
    b.match(topic, ob)
    assert [id(e) for e in oa] * 2 == [id(e) for e in ob]


@settings(max_examples=300, deadline=None)
@given(st.lists(topics(), max_size=30), filters())
def test_retained_tree_agrees_with_reference(tops: list[str], flt: str) -> None:
    tree = TopicTree()
    for t in tops:
        tree.set(t, t)
    uniq = sorted(set(tops), key=lambda t: t.split("/"))
    assert tree.count == len(uniq)
    out: list[str] = []
    tree.match_filter(flt, out)
    # exactly the matching topics, in level-lexicographic order
    assert out == [t for t in uniq if topic_matches(flt, t)]
    for t in uniq:
        assert tree.get(t) == t
        assert tree.remove(t) == t
        assert tree.get(t) is None
    assert tree.count == 0
    assert tree._root == [None, None]


def _witnesses(inner: str) -> list[str]:
    # topics matched by `inner`: "+" -> a fresh level, "#" -> nothing (when
    # not first), one or two fresh levels
    levels = inner.split("/")
    head = ["Q" if lv == "+" else lv for lv in levels]
    if head[-1] != "#":
        return ["/".join(head)]
    base = head[:-1]
    out = []
    if base:
        out.append("/".join(base))
    out.append("/".join([*base, "Q"]))
    out.append("/".join([*base, "Q", "Q"]))
    return out


@settings(max_examples=1000, deadline=None)
@given(filters(), filters(), st.lists(topics(), max_size=20))
def test_filter_covers_sound_and_exact(outer: str, inner: str, tops: list[str]) -> None:
    covers = filter_covers(outer, inner)
    cands = _witnesses(inner) + tops
    for t in cands:
        if covers and topic_matches(inner, t):
            assert topic_matches(outer, t), (outer, inner, t)  # sound
    if not covers:
        # exact: some topic matched by inner escapes outer
        assert any(topic_matches(inner, t) and not topic_matches(outer, t) for t in _witnesses(inner)), (outer, inner)
    if outer == inner:
        assert covers


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab/+#$\x00", max_size=12))
def test_validators_never_raise(s: str) -> None:
    assert validate_topic_name(s, 3, 8) in (0, 0x90)
    assert validate_topic_filter(s, 3, 8) in (0, 0x8F)
    group, inner = parse_shared("$share/" + s)
    if (group, inner) != SHARED_INVALID:
        assert group and "/" not in group and "+" not in group and "#" not in group
        assert inner is not None
        assert validate_topic_filter(inner, 0, 0) == 0
    if validate_topic_name(s, 0, 0) == 0:
        # a valid name matches itself as a filter
        assert topic_matches(s, s)
