"""One room for each kind of change (docs/architecture.md): the boundaries
between the core's parts that no import rule shows, read from the sources
with `ast`. Each check proves itself on a probe it must catch."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

# The attributes of a Connection that hold its output: only the output part
# (and the Connection's own reset) changes them.
OUTPUT_FIELDS = ("out", "more", "out_bytes", "paused")
OUTPUT_ROOM = ("common/broker/output.py", "common/broker/connection.py")


def _sources(folder: str) -> dict[str, str]:
    return {str(p.relative_to(REPO_ROOT)): p.read_text() for p in sorted((REPO_ROOT / folder).rglob("*.py"))}


def attribute_writers(sources: dict[str, str], fields: tuple[str, ...]) -> list[str]:
    """'path:line field' for each assignment (plain or augmented) to an
    attribute named in `fields`."""
    found = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            else:
                continue
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in fields:
                    found.append(f"{path}:{node.lineno} {target.attr}")
    return found


def attribute_reads(text: str, owner: str, fields: tuple[str, ...]) -> list[str]:
    """The `owner.<field>` chains in `text` (e.g. broker.listener)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in fields:
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name == owner:
                found.append(f"{owner}.{node.attr}")
    return found


def test_only_the_output_part_changes_a_connections_output() -> None:
    broker = {p: t for p, t in _sources("common/broker").items() if p not in OUTPUT_ROOM}
    assert attribute_writers(broker, OUTPUT_FIELDS) == []
    probe = {"probe.py": "def f(conn):\n    conn.out_bytes += 1\n    conn.more = None\n"}
    assert attribute_writers(probe, OUTPUT_FIELDS) == ["probe.py:2 out_bytes", "probe.py:3 more"]


# What the driver and the turns must ask the output part for, not read off
# the broker: the store's listener, the dirty list, the sync gate's fields.
GATE_INSIDES = ("listener", "connections", "sync_from", "sync_waiting", "take_output", "next_dirty", "is_closing")


def test_driver_and_turns_ask_the_output_part() -> None:
    for path in ("common/driver.py", "common/turns.py"):
        text = (REPO_ROOT / path).read_text()
        assert attribute_reads(text, "broker", GATE_INSIDES) == [], path
    assert "broker" not in (REPO_ROOT / "common/turns.py").read_text().replace("common.broker", "")
    probe = "def f(self, broker):\n    return broker.listener.pending() or self.broker.sync_waiting\n"
    assert sorted(attribute_reads(probe, "broker", GATE_INSIDES)) == ["broker.listener", "broker.sync_waiting"]


def changes_in(text: str, functions: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    """'function: target' for each attribute the named functions of `text`
    assign (or make with .extra()) on a name not in `allowed`."""
    found = []
    for node in ast.parse(text).body:
        if not isinstance(node, ast.FunctionDef) or node.name not in functions:
            continue
        for inner in ast.walk(node):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign):
                targets = list(inner.targets)
            elif isinstance(inner, ast.AugAssign):
                targets = [inner.target]
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "extra":
                targets = [inner.func]
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id not in allowed:
                    found.append(f"{node.name}: {target.value.id}.{target.attr}")
    return found


def _connect_checks() -> tuple[str, ...]:
    import common.broker.handle_connect as hc

    return tuple(check.__name__ for check in hc.CONNECT_CHECKS)


def test_connect_checks_only_judge() -> None:
    # What a check found goes into the Found (and counters of refusals into
    # broker.stats); the connection, the packet and a session change only in
    # handle_connect._apply, after every check passed.
    text = (REPO_ROOT / "common/broker/handle_connect.py").read_text()
    assert changes_in(text, _connect_checks(), ("found", "broker")) == []
    login = (REPO_ROOT / "common/broker/login.py").read_text()
    assert changes_in(login, ("login", "rules_for"), ("found",)) == []
    # (The words and counter of two refusals, and the will's check, are
    # refusal.py's and wills.py's: loaded by the first that needs them.)
    refusal = (REPO_ROOT / "common/broker/refusal.py").read_text()
    assert changes_in(refusal, ("anonymous_refused", "owner_refusal"), ("broker",)) == []
    wills = (REPO_ROOT / "common/broker/wills.py").read_text()
    assert changes_in(wills, ("refusal",), ("found", "broker")) == []
    assert changes_in(text, ("_apply",), ("found",)) == ["_apply: conn.user", "_apply: conn.acl", "_apply: pkt.client_id"]
    probe = "def _check_x(broker, conn, pkt, found, now):\n    conn.user = 1\n    conn.extra().assigned = True\n"
    assert changes_in(probe, ("_check_x",), ("found",)) == ["_check_x: conn.user", "_check_x: conn.extra"]


# The host's transports: they report to the server through events.py's
# ConnectionEvents and never import server.py, not even for types.
TRANSPORTS = ("client_protocol", "websocket", "epoll_hub", "listeners", "shared_selector", "events", "mqttsn_udp")


def imported_modules(text: str) -> set[str]:
    """Every module `text` imports (any form, in functions and under TYPE_CHECKING too)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_transports_never_import_the_server() -> None:
    for name in TRANSPORTS:
        text = (REPO_ROOT / "cpython_host" / "transports" / f"{name}.py").read_text()
        assert "cpython_host.server" not in imported_modules(text), name
    probe = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cpython_host import server\n"
    assert "cpython_host.server" in imported_modules(probe)


def server_writes(sources: dict[str, str]) -> list[str]:
    """'path:line attr' for each assignment to an attribute of `server` or `<x>.server`."""
    found = []
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            for target in targets:
                if not isinstance(target, ast.Attribute):
                    continue
                owner = target.value
                if (isinstance(owner, ast.Name) and owner.id == "server") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "server"
                ):
                    found.append(f"{path}:{node.lineno} {target.attr}")
    return found


def test_no_module_writes_into_the_server() -> None:
    sources = {p: t for p, t in _sources("cpython_host").items() if p != "cpython_host/server.py"}
    assert server_writes(sources) == []
    probe = {"probe.py": "def f(server, self):\n    server.hub = 1\n    self.server.debug = True\n"}
    assert server_writes(probe) == ["probe.py:2 hub", "probe.py:3 debug"]
