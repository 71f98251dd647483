"""docs/architecture.md names every module of the core and of both shells,
each in the section of its part (a module added without a word on its job
fails here)."""

from __future__ import annotations

from tests.conftest import REPO_ROOT

# The parts and the heading of the doc's section on each.
SECTIONS = {
    "common": "## common/",
    "cpython_host": "## cpython_host/",
    "firmware": "## firmware/",
}


def section(doc: str, heading: str) -> str:
    start = doc.index(heading)
    end = doc.find("\n## ", start + len(heading))
    return doc[start : end if end >= 0 else len(doc)]


def unnamed(doc: str, part: str, files: list[str]) -> list[str]:
    """The files of `part` (paths relative to it) whose name its section does not mention."""
    text = section(doc, SECTIONS[part])
    return [f for f in files if f.rsplit("/", 1)[-1] not in text]


def _modules(part: str) -> list[str]:
    root = REPO_ROOT / part
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "__init__.py")


def test_every_module_is_named_in_its_section() -> None:
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    for part in SECTIONS:
        assert unnamed(doc, part, _modules(part)) == [], part


def test_the_check_sees_an_unnamed_module() -> None:
    doc = "## common/\n`driver.py` drives.\n## firmware/\n`shell.py`\n"
    assert unnamed(doc, "common", ["driver.py", "broker/new_room.py", "shell.py"]) == ["broker/new_room.py", "shell.py"]
