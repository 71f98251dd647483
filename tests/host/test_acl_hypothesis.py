# Property tests for common/broker/acl.py (CPython only), against a
# brute-force oracle over every topic of up to five levels of a small
# alphabet (the reference matcher topic_matches() decides each one):
# - a filter is granted only if every topic it can match is readable, so
#   no wildcard or "$" topic escalates a client's read rights (a share
#   group's $share/G/F is judged on F: tests/core/test_security.py);
#   with one read rule and no deny rule the test is exact (granted iff so);
# - can_read / can_write (the allocation-free matcher) agree with the oracle;
# - filters_overlap is exact (it decides which deny rules bar a filter);
# - pattern substitution is one pass and refuses identities that widen it.

import itertools
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from common.broker.acl import Acl, filters_overlap, substitute
from common.broker.topics import topic_matches
from tests.host.test_topics_hypothesis import LITERALS, filters

# Every topic name of 1..5 levels over the alphabet (3,905 of them): the
# strategy's filters have at most 4 levels before a "#", so a topic one
# filter matches and another does not (or both do) is among them.
UNIVERSE = ["/".join(p) for n in range(1, 6) for p in itertools.product(LITERALS, repeat=n)]
ACCESS = ("read", "write", "readwrite", "deny")


@st.composite
def rule_lists(draw: Any) -> list[tuple[str, str]]:
    return draw(st.lists(st.tuples(st.sampled_from(ACCESS), filters()), min_size=1, max_size=5))


def oracle(rules: list[tuple[str, str]], topic: str, want: str) -> bool:
    """Readable ("read") or writable ("write"): an allowing rule matches, no deny rule does."""
    allowed = False
    for access, flt in rules:
        if topic_matches(flt, topic):
            if access == "deny":
                return False
            if want in access:
                allowed = True
    return allowed


def client(rules: list[tuple[str, str]]) -> Any:
    text = "user u\n" + "".join(f"topic {access} {flt}\n" for access, flt in rules)
    return Acl.parse(text, "acl").for_client("u", "c")


@settings(max_examples=300, deadline=None)
@given(rule_lists(), filters())
def test_granted_filter_reads_only_readable_topics(rules: list[tuple[str, str]], flt: str) -> None:
    acl = client(rules)
    matched = [t for t in UNIVERSE if topic_matches(flt, t)]
    if acl.may_subscribe(flt):
        for t in matched:
            assert oracle(rules, t, "read"), (flt, t)


@settings(max_examples=300, deadline=None)
@given(filters(), filters())
def test_single_read_rule_is_exact(rule: str, flt: str) -> None:
    acl = client([("read", rule)])
    every = all(topic_matches(rule, t) for t in UNIVERSE if topic_matches(flt, t))
    assert acl.may_subscribe(flt) == every, (rule, flt)


@settings(max_examples=300, deadline=None)
@given(rule_lists(), st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=20))
def test_read_and_write_checks_agree_with_the_oracle(rules: list[tuple[str, str]], topics: list[str]) -> None:
    acl = client(rules)
    for t in topics:
        assert acl.can_read(t) == oracle(rules, t, "read"), t
        assert acl.can_write(t) == oracle(rules, t, "write"), t


@settings(max_examples=500, deadline=None)
@given(filters(), filters())
def test_overlap_is_exact(a: str, b: str) -> None:
    shared = any(topic_matches(a, t) and topic_matches(b, t) for t in UNIVERSE)
    assert filters_overlap(a, b) == shared, (a, b)


def test_examples_from_the_issue() -> None:
    home = client([("read", "home/+")])
    assert home.may_subscribe("home/+")
    for flt in ("home/#", "+/+", "#", "+/#"):
        assert not home.may_subscribe(flt), flt


# ---------------------------------------------------------------- patterns
# substitute() against a reference that never rescans: re.sub walks the
# pattern once, and what it puts in is not looked at again. Identities come
# from the whole character set (st.text: every code point but surrogates),
# with the characters that matter made likely.

IDENTITY_CHARS = st.one_of(st.sampled_from("%uc+#/$ a"), st.characters(exclude_categories=("Cs",)))
identities = st.text(IDENTITY_CHARS, max_size=8)
PATTERN_PARTS = st.sampled_from(("%u", "%c", "%", "u", "c", "a", "/", "dev", "$x", "%%u"))


@st.composite
def patterns(draw: Any) -> str:
    text = "".join(draw(st.lists(PATTERN_PARTS, min_size=1, max_size=6)))
    return text + draw(st.sampled_from(("", "/#", "/+")))


def reference(pattern: str, user: str, client_id: str) -> str | None:
    """One left-to-right pass with re.sub; None if an identity put in holds
    + # /, is empty, or starts the filter with $."""
    refused = False

    def put(m: re.Match[str]) -> str:
        nonlocal refused
        value = user if m.group() == "%u" else client_id
        if not value or any(ch in value for ch in "+#/") or (m.start() == 0 and value.startswith("$")):
            refused = True
        return value

    out = re.sub("%[uc]", put, pattern)
    return None if refused else out


@settings(max_examples=500, deadline=None)
@given(patterns(), identities, identities)
def test_substitution_matches_a_reference_that_never_rescans(pattern: str, user: str, client_id: str) -> None:
    assert substitute(pattern, user, client_id) == reference(pattern, user, client_id)


@settings(max_examples=300, deadline=None)
@given(identities, identities, st.sampled_from(UNIVERSE))
def test_a_pattern_grants_only_the_clients_own_level(user: str, client_id: str, topic: str) -> None:
    # Whatever the names, "d/%u/#" and "%c/#" let a client read only under its
    # own literal level: never a topic of another name, never a $ topic.
    acl = Acl.parse("pattern read d/%u/#\npattern read %c/#", "acl").for_client(user, client_id)
    for t in (topic, f"d/{topic}", f"$SYS/{topic}", "$SYS"):
        if acl.can_read(t):
            assert t.startswith((f"d/{user}/", f"{client_id}/")) or t in (f"d/{user}", client_id), t
    if acl.refused is None:
        assert acl.can_read(f"d/{user}/x") and acl.can_read(f"{client_id}/x")
