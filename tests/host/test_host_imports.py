"""No import cycle in the host shell (cpython_host/): no module imports, directly or
through others, one that imports it back — not even inside a function, where a
lazy import only hides the cycle, nor under `if TYPE_CHECKING:`, where a cycle
is one the type checker and the reader still have to untangle. (common/'s own check is
tests/core/test_sans_io.py TestNoCycles, which runs under MicroPython too.)
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT


def host_modules(root: Path) -> dict[str, Path]:
    """{dotted name: file} of the host's modules under `root`."""
    out = {}
    for p in sorted((root / "cpython_host").rglob("*.py")):
        parts = p.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def all_imports(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports (function bodies and `if TYPE_CHECKING:` included)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found & known


def import_cycles(root: Path) -> list[list[str]]:
    """Each cycle of the import graph, as its sorted modules."""
    modules = host_modules(root)
    graph = {m: all_imports(p, set(modules)) - {m} for m, p in modules.items()}
    cycles = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for dep in graph[node]:
            if dep == start:
                cycles.add(tuple(sorted(path)))
            elif dep not in path and dep > start:  # each cycle found once, from its least module
                walk(start, dep, [*path, dep])

    for m in graph:
        walk(m, m, [m])
    return [list(c) for c in sorted(cycles)]


def test_the_host_has_no_import_cycle() -> None:
    assert import_cycles(REPO_ROOT) == []


def test_the_check_sees_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "cpython_host"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cpython_host.b import thing\n")
    (pkg / "b.py").write_text("def later():\n    from cpython_host import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cpython_host import a\n")
    (pkg / "d.py").write_text("from cpython_host import c\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cpython_host.f import F\n")
    (pkg / "f.py").write_text("from cpython_host import e\n")
    assert import_cycles(tmp_path) == [["cpython_host.a", "cpython_host.b"], ["cpython_host.e", "cpython_host.f"]]
