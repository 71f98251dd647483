"""Compute docs/conformance.md from the statement list and the tests' tags.

    python tools/conformance.py           # rewrite docs/conformance.md
    python tools/conformance.py --check   # exit 1 if it is out of date

Tests name the statement they check in a comment, `# [MQTT-3.1.2-24]`, in
the test or in the comment block right above it. The statements and the rules
that say which version a tag belongs to are in tools/conformance_statements.py.
A tag belongs to the test (function, or pytest parametrisation) whose lines
contain it; a tag outside any function belongs to its class or module (a data
table the tests of that module read).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools import conformance_statements as S

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "conformance.md"
VERSIONS = ("3.1.1", "5.0")

_TAG = re.compile(r"\[MQTT-([0-9][0-9.\-]*?)\]")
_PREFIX = re.compile(r"(?<![\w.(])(3\.1\.1|5\.0)\s+$")
_SUFFIX = re.compile(r"^\s*\((3\.1\.1|5\.0)\)")


class Tag:
    def __init__(self, path: str, line: int, raw: str, version: str, sid: str, where: str) -> None:
        self.path = path
        self.line = line
        self.raw = raw  # the id as written
        self.version = version  # "3.1.1" or "5.0", or "" when unknown
        self.sid = sid  # the statement id it resolves to
        self.where = where  # node id of the test holding it


def statements(version: str) -> tuple[tuple[str, str, str, str], ...]:
    return S.V311 if version == "3.1.1" else S.V5


def _ids(version: str) -> set[str]:
    return {row[0] for row in statements(version)}


def _owners(path: str, source: str) -> list[tuple[int, int, str]]:
    """(first line, last line, node id) of each test function, class and helper."""
    tree = ast.parse(source)
    spans: list[tuple[int, int, str]] = []
    lines = source.splitlines()

    def start_of(node: ast.AST) -> int:
        first: int = getattr(node, "lineno", 1)
        for dec in getattr(node, "decorator_list", []):
            first = min(first, dec.lineno)
        # The comment block right above belongs to the node.
        while first > 1 and lines[first - 2].strip().startswith("#"):
            first -= 1
        return first

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans.append((start_of(node), node.end_lineno or node.lineno, prefix + node.name))
            elif isinstance(node, ast.ClassDef):
                spans.append((start_of(node), node.end_lineno or node.lineno, prefix + node.name))
                visit(node.body, prefix + node.name + "::")

    visit(tree.body, path + "::")
    return spans


def _owner(spans: list[tuple[int, int, str]], line: int, path: str) -> str:
    best = path
    size = 1 << 30
    for first, last, name in spans:
        if first <= line <= last and last - first < size:
            best = name
            size = last - first
    return best


def _resolve(raw: str, path: str, qualifier: str) -> tuple[str, str]:
    """(version, statement id) for a tag; version "" if it names no statement."""
    sid = S.ALIASES.get(raw, raw)
    if qualifier:
        return (qualifier, sid) if sid in _ids(qualifier) else ("", sid)
    version = S.FILE_VERSION.get(path, S.DEFAULT_FILE_VERSION)
    if version != "any":
        return (version, sid) if sid in _ids(version) else ("", sid)
    for v in VERSIONS:
        if sid in _ids(v):
            return v, sid
    return "", sid


def scan(root: Path = ROOT) -> list[Tag]:
    tags: list[Tag] = []
    for file in sorted((root / "tests").rglob("*.py")):
        path = file.relative_to(root).as_posix()
        source = file.read_text(encoding="utf-8")
        if "[MQTT-" not in source:
            continue
        spans = _owners(path, source)
        for n, text in enumerate(source.splitlines(), 1):
            for m in _TAG.finditer(text):
                pre = _PREFIX.search(text[: m.start()])
                post = _SUFFIX.match(text[m.end() :])
                qualifier = post.group(1) if post else (pre.group(1) if pre else "")
                version, sid = _resolve(m.group(1), path, qualifier)
                tags.append(Tag(path, n, m.group(1), version, sid, _owner(spans, n, path)))
    return tags


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(tags: list[Tag]) -> str:
    counted: dict[tuple[str, str], list[str]] = {}
    not_counted: list[tuple[Tag, str]] = []
    unknown: list[Tag] = []
    for t in tags:
        if not t.version:
            unknown.append(t)
            continue
        why = S.NOT_COUNTED.get((t.path, t.version, t.sid))
        if why is not None:
            not_counted.append((t, why))
            continue
        names = counted.setdefault((t.version, t.sid), [])
        if t.where not in names:
            names.append(t.where)

    out: list[str] = []
    w = out.append
    w("# Siskin conformance matrix (server-side normative statements)")
    w("")
    w("Generated by `python tools/conformance.py` from the statement list in")
    w("`tools/conformance_statements.py` and the `# [MQTT-x]` tags of the tests; do not")
    w("edit by hand. `tests/host/test_conformance.py` fails when this file is out of date.")
    w("")
    w("| Version | Statements in the spec | In scope (Server + checked on input) | With a test | Without a test | Not applicable | Client-only (out of scope) |")
    w("|---|---|---|---|---|---|---|")
    for version in VERSIONS:
        rows = statements(version)
        in_scope = [r for r in rows if r[1] in ("S", "I")]
        tested = [r for r in in_scope if (version, r[0]) in counted]
        na = [r for r in rows if r[1] == "N"]
        client_rows = [r for r in rows if r[1] == "C"]
        w(
            f"| MQTT {version} | {len(rows)} | {len(in_scope)} | {len(tested)} | {len(in_scope) - len(tested)}"
            f" | {len(na)} | {len(client_rows)} |"
        )
    w("")
    w("Sources: MQTT 3.1.1: every statement of Appendix B of mqtt-v3.1.1-os. MQTT 5.0:")
    w("every id-bearing statement of mqtt-v5.0-os, section by section (the 5.0 spec has")
    w("further requirements without ids, e.g. in 4.7.3, which no matrix can list).")
    w("")
    w("How to read it:")
    w("- Scope **S**: the statement binds the Server (alone, or as \"Client and Server\",")
    w("  \"receiver\", \"sender\"). Scope **I**: it binds what the Client sends, and the Server")
    w("  checks it on input (3.1.1 [MQTT-3.1.4-1], [MQTT-4.8.0-1]; 5.0 [MQTT-4.13.1-1]); the")
    w("  test checks the Server's reaction. **N**: binds the Server but cannot apply (the")
    w("  note says why). Client-only statements are listed after each table.")
    w("- A test names a statement in a comment `# [MQTT-x]` inside it or right above it.")
    w("  The ids differ between the versions: a tag belongs to the version of its test file")
    w("  (`FILE_VERSION` in the statement list), unless it says otherwise (`5.0 [MQTT-x]`,")
    w("  `[MQTT-x] (3.1.1)`); in version-independent files (codec, topics, UTF-8) an id is")
    w("  looked up in 3.1.1 first, then in 5.0.")
    w("- Parametrised cases list the test function; the tag sits on the case.")
    for version in VERSIONS:
        rows = statements(version)
        w("")
        w(f"## MQTT {version}")
        w("")
        if version == "3.1.1":
            w("| Statement | Scope | Requires (summary) | 5.0 id | Test(s) | Notes |")
            w("|---|---|---|---|---|---|")
        else:
            w("| Statement | Scope | Requires (summary) | Test(s) | Notes |")
            w("|---|---|---|---|---|")
        for sid, scope, summary, note in rows:
            if scope == "C":
                continue
            names = counted.get((version, sid), [])
            tests = "<br>".join(f"`{n}`" for n in sorted(names))
            if scope == "N":
                tests = "not applicable"
            elif not tests:
                tests = "**no test**"
            cells = [f"[MQTT-{sid}]", scope, _cell(summary)]
            if version == "3.1.1":
                cells.append(S.V311_TO_V5.get(sid, ""))
            cells += [tests, _cell(note)]
            w("| " + " | ".join(cells) + " |")
        client = [r[0] for r in rows if r[1] == "C"]
        w("")
        w("Client-only, out of scope: " + ", ".join(client) + ".")
        stray = [(n, sid) for (v, sid), ns in sorted(counted.items()) if v == version for n in ns if sid in client]
        if stray:
            w("Tests that also name a client-only statement (end-to-end checks, not counted): ")
            w(", ".join(f"`{n}` ({sid})" for n, sid in stray) + ".")
    w("")
    w("## Tags not counted")
    w("")
    if not_counted:
        for t, why in not_counted:
            w(f"- `{t.path}:{t.line}` [MQTT-{t.raw}] ({t.version}): {why}")
    else:
        w("None.")
    w("")
    w("## Tags that name no statement")
    w("")
    w("Section references, ranges and ids of the other version; they count for nothing.")
    w("")
    if unknown:
        for t in unknown:
            w(f"- `{t.path}:{t.line}` [MQTT-{t.raw}]")
    else:
        w("None.")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render(scan())
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print("docs/conformance.md is out of date: run python tools/conformance.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
