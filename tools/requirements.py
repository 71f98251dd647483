"""Print what make's venvs install: the host's dependencies and the named extras of pyproject.toml.

    python tools/requirements.py [EXTRA ...] > requirements.txt

pyproject.toml is the one place they are listed; the Makefile runs this with
the venv's own interpreter, before anything is installed in it: CPython >= 3.11
reads the file with tomllib, PyPy's Python 3.9 with the tomli its pip carries.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # PyPy's Python 3.9: a fresh venv has only pip
    from pip._vendor import tomli as tomllib


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project["optional-dependencies"]
    unknown = [x for x in extras if x not in optional]
    if unknown:
        raise SystemExit(f"requirements: no extra {', '.join(unknown)} in {pyproject} (has: {', '.join(optional)})")
    return list(project["dependencies"]) + [r for x in extras for r in optional[x]]


if __name__ == "__main__":
    print("\n".join(requirements(Path(__file__).resolve().parent.parent / "pyproject.toml", sys.argv[1:])))
