"""docs/conformance.md is computed from the tests' tags: keep it current.

Regenerate with `python tools/conformance.py` after adding or moving a
`# [MQTT-x]` tag. Only parses files; no broker runs.
"""

from __future__ import annotations

from tools import conformance as K
from tools import conformance_statements as S

# Test files whose tags must all name a statement of their version.
OWNED = ("tests/core/test_broker_", "tests/core/test_conformance_", "tests/host/test_server_")


def test_matrix_is_up_to_date() -> None:
    expected = K.render(K.scan())
    assert K.DOC.read_text(encoding="utf-8") == expected, "run: python tools/conformance.py"


def test_every_tag_in_the_broker_tests_names_a_statement() -> None:
    stray = [f"{t.path}:{t.line} [MQTT-{t.raw}]" for t in K.scan() if not t.version and t.path.startswith(OWNED)]
    assert stray == []


def test_every_server_statement_has_a_test() -> None:
    tagged = {(t.version, t.sid) for t in K.scan() if t.version and (t.path, t.version, t.sid) not in S.NOT_COUNTED}
    missing = [
        f"{version} {sid}"
        for version in K.VERSIONS
        for sid, scope, _summary, _note in K.statements(version)
        if scope in ("S", "I") and (version, sid) not in tagged
    ]
    assert missing == []


def test_statement_lists_are_well_formed() -> None:
    for version in K.VERSIONS:
        ids = [row[0] for row in K.statements(version)]
        assert len(ids) == len(set(ids)), version
        for sid, scope, summary, note in K.statements(version):
            assert scope in ("S", "I", "C", "N"), sid
            assert summary, sid
            assert scope != "N" or note, f"{sid}: a not-applicable statement needs its reason"
    v5 = {row[0] for row in S.V5}
    v311 = {row[0] for row in S.V311}
    for a, b in S.V311_TO_V5.items():
        assert a in v311 and b in v5, (a, b)
